"""Settings shared by Parley's processes: the base every settings class derives from.

Each process owns one frozen settings class (``PARLEY_API_``, ``PARLEY_WORKER_``, ``PARLEY_RETRIEVER_``)
that is read once at start-up and injected. Each room of ``services`` keeps the settings of its own
part beside it (``services.llm.settings`` how to reach the LLM servers, ``services.jobstore.settings``
the retention, ``services.observability.settings`` logs and traces); this module holds the base class,
the data directory and how a process reaches the retrieval service (``PARLEY_RETRIEVER_URL``).
Besides these classes only plumbing touches ``os.environ``: the Prometheus multiprocess directory
(``services.observability.metrics``), the JVM set-up for Anserini (``retriever.jvm``) and the
environments handed to child processes (``parley up``, the test helpers).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Where Parley keeps its index, caches and assembled model files unless told otherwise."""
    return Path.cwd() / ".parley"


class ParleySettings(BaseSettings):
    """Base for all settings classes: frozen, environment first, unknown variables ignored."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_nested_delimiter="__")


class RetrieverClientSettings(ParleySettings):
    """How workers and the CLI reach the retrieval service (``PARLEY_RETRIEVER_URL``)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_RETRIEVER_", frozen=True, extra="ignore")

    url: str | None = Field(default=None, description="retriever base URL; unset = in-process retrieval")
    client_timeout_s: float = Field(default=30.0, gt=0)
    client_max_attempts: int = Field(default=100, ge=1, le=10_000)
    client_retry_window_s: float = Field(
        default=300.0,
        gt=0,
        description="a retriever unavailable for longer than this fails the pool (shorter: waited out)",
    )

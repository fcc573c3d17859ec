"""Settings shared by Parley's processes: the base every settings class derives from.

Each process owns one frozen settings class (``PARLEY_API_``, ``PARLEY_WORKER_``, ``PARLEY_RETRIEVER_``)
that is read once at start-up and injected. Each room of ``services`` keeps the settings of its own
part beside it (``services.llm.settings`` how to reach the LLM servers, ``services.jobstore.settings``
the retention, ``services.observability.settings`` logs and traces); this module holds the base class,
the data directory, the field types whose constraints recur across the classes, and how a process
reaches the retrieval service (``PARLEY_RETRIEVER_URL``).
Besides these classes only plumbing touches ``os.environ``: the Prometheus multiprocess directory
(``services.observability.metrics``), the JVM set-up for Anserini (``retriever.jvm``) and the
environments handed to child processes (``parley up``, the test helpers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# The constraints that several processes' knobs share, stated once: a class names the type and gives
# only its knob's default and description (the configuration reference shows the bounds either way).
Seconds = Annotated[float, Field(gt=0)]
"""A timeout, interval, window or lifetime in seconds: positive."""
SecondsOrZero = Annotated[float, Field(ge=0)]
"""A pause, grace or lifetime in seconds where 0 means none (the description says what 0 does)."""
Port = Annotated[int, Field(ge=1, le=65535)]
"""A TCP port a process listens on."""
MetricsPort = Annotated[int, Field(ge=0, le=65535)]
"""The port of a process's own /metrics endpoint; 0 = none."""
RetryAttempts = Annotated[int, Field(ge=1, le=10_000)]
"""Attempts of one call to another service before it fails (its retry window bounds them in time)."""


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
    client_timeout_s: Seconds = 30.0
    client_max_attempts: RetryAttempts = 100
    client_retry_window_s: Seconds = Field(
        default=300.0,
        description="a retriever unavailable for longer than this fails the pool (shorter: waited out)",
    )

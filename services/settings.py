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

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

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


class FileVariables(PydanticBaseSettingsSource):
    """``<VARIABLE>_FILE=path``: the value of ``VARIABLE`` read from a file, the way compose and
    Kubernetes mount secrets (``/run/secrets/…``), so a password never sits in the environment.

    Any top-level variable may be given this way (``PARLEY_WORKER_REDIS_URL_FILE``,
    ``PARLEY_LLM_API_KEY_FILE``, ``PARLEY_RETRIEVER_TOKEN_FILE``); one trailing newline is dropped.
    Setting both ``VARIABLE`` (to anything but the empty string, which a compose override uses to
    clear the base file's value) and ``VARIABLE_FILE`` is refused, as is a file that cannot be read;
    the message names the variable and the path, never the content.
    """

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self._environ = {k.upper(): v for k, v in os.environ.items()}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: ``__call__`` reads every field at once.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        prefix = str(self.settings_cls.model_config.get("env_prefix") or "").upper()
        out: dict[str, Any] = {}
        for name, info in self.settings_cls.model_fields.items():
            alias = info.validation_alias if isinstance(info.validation_alias, str) else None
            variable = (alias or f"{prefix}{name}").upper()
            path = self._environ.get(f"{variable}_FILE")
            if path is None:
                continue
            if self._environ.get(variable):
                raise SettingsError(f"{variable} and {variable}_FILE are both set; set one of them")
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise SettingsError(f"{variable}_FILE: cannot read {path}: {exc.strerror}") from None
            text = text.removesuffix("\n").removesuffix("\r")
            out[name] = self.decode_complex_value(name, info, text) if self.field_is_complex(info) else text
        return out


class ParleySettings(BaseSettings):
    """Base for all settings classes: frozen, environment first, unknown variables ignored.

    Sources, first wins: arguments, ``<VARIABLE>_FILE`` (``FileVariables``; never together with a
    non-empty ``VARIABLE``), the environment, .env files, a secrets directory; then the defaults.
    """

    # A validation error never repeats the input: it may hold a password (a Redis URL, an API key).
    model_config = SettingsConfigDict(
        frozen=True, extra="ignore", env_nested_delimiter="__", hide_input_in_errors=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The default sources with ``FileVariables`` before the environment: an empty ``VARIABLE``
        (a compose override clearing the base file's value) gives way to ``VARIABLE_FILE``."""
        return (
            init_settings,
            FileVariables(settings_cls),
            env_settings,
            dotenv_settings,
            file_secret_settings,
        )


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
    token: SecretStr | None = Field(
        default=None,
        description="the retriever's API token, sent as Authorization: Bearer (the retriever reads the "
        "same variable and then requires it)",
    )
    ca_file: Path | None = Field(
        default=None, description="CA certificate (PEM) of an https:// retriever URL; unset = system CAs"
    )

"""The Redis settings of the processes that keep jobs (the gateway and the worker), stated once.

``RedisSettingsMixin`` is a mixin of fields, not a settings class of its own: ``ApiSettings`` and
``WorkerSettings`` derive from it beside ``ParleySettings``, so each process still reads one class and
every variable carries that class's prefix (``PARLEY_API_REDIS_URL``, ``PARLEY_WORKER_REDIS_URL``).
A plain pydantic model rather than a ``ParleySettings``, so the configuration reference
(``scripts/config_reference.py``) lists its fields under each process and not as a class of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, Field, model_validator

from services.redis_connect import REDIS_URL_HELP, RedisConfigError, RedisSpec, spec_from_settings


def redis_url_field(store: str) -> Any:
    """``redis_url``: a local Redis unless set; ``store`` says what the process keeps there."""
    return Field(default="redis://localhost:6379/0", description=f"{store}: {REDIS_URL_HELP}")


def wait_replicas_field(waits: str) -> Any:
    """``redis_wait_replicas``: ``waits`` says what of the process waits for the replicas (Redis WAIT)."""
    return Field(
        default=0,
        ge=0,
        description=f"{waits}; 0 = asynchronous replication only (a failover can lose the last writes)",
    )


class RedisSettingsMixin(BaseModel):
    """The job store's and the Celery broker's Redis: URLs, TLS files, Sentinel master, replica waits.

    A process declares ``redis_url`` (``redis_url_field``) or ``redis_wait_replicas``
    (``wait_replicas_field``) again where it has its own words for them; a field declared again keeps
    its place among these.
    """

    redis_url: str = redis_url_field("job store")
    broker_url: str | None = Field(default=None, description="Celery broker; unset = redis_url")
    key_prefix: str = "parley"
    redis_tls_ca_file: Path | None = Field(
        default=None,
        description="CA certificate (PEM) that signs the Redis servers' (and sentinels') certificates; "
        "with rediss:// URLs (unset: the system's CAs), and with sentinel:// URLs it turns TLS on",
    )
    redis_tls_cert_file: Path | None = Field(
        default=None, description="client certificate (PEM) for Redis servers that ask for one"
    )
    redis_tls_key_file: Path | None = Field(default=None, description="the client certificate's key")
    redis_sentinel_master: str | None = Field(
        default=None, description="with sentinel:// URLs: the name of the Redis group the sentinels watch"
    )
    redis_wait_replicas: int = wait_replicas_field("writes wait until this many replicas hold them")
    redis_wait_timeout_ms: int = Field(
        default=1000, ge=1, description="the longest wait for redis_wait_replicas, in milliseconds"
    )

    @property
    def broker(self) -> str:
        return self.broker_url or self.redis_url

    @model_validator(mode="after")
    def _redis_specs(self) -> Self:
        try:
            self.redis_spec()
            self.broker_spec()
        except RedisConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    def redis_spec(self) -> RedisSpec:
        """How this process reaches its job store."""
        return spec_from_settings(self, self._variable("redis_url"), self.redis_url)

    def broker_spec(self) -> RedisSpec:
        """How this process reaches the Celery broker (the job store's Redis unless broker_url)."""
        variable = self._variable("broker_url" if self.broker_url else "redis_url")
        return spec_from_settings(self, variable, self.broker)

    def _variable(self, field: str) -> str:
        """The environment variable of ``field``, under the settings class's prefix (errors name it)."""
        prefix = dict(type(self).model_config).get("env_prefix") or ""
        return f"{prefix}{field}".upper()

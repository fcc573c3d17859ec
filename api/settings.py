"""Settings of the API gateway (``PARLEY_API_*``), read once at start-up and injected."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.settings import ParleySettings


class ApiSettings(ParleySettings):
    """Where the job store and broker are, who may call, and the limits that protect the service."""

    model_config = SettingsConfigDict(
        env_prefix="PARLEY_API_", frozen=True, extra="ignore", env_nested_delimiter="__"
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    redis_url: str = Field(default="redis://localhost:6379/0", description="job store")
    broker_url: str | None = Field(default=None, description="Celery broker; unset = redis_url")
    key_prefix: str = "parley"
    job_ttl_s: int = Field(default=7 * 24 * 3600, ge=60)

    # API keys as name → sha256 hex digest of the key (``parley api hash-key KEY`` prints one).
    # Empty: no authentication, every caller is the owner "public" (development only).
    keys: dict[str, str] = Field(default_factory=dict)
    rate_limit_per_minute: int = Field(default=600, ge=1, description="requests per key per minute")
    max_active_jobs_per_key: int = Field(default=20_000, ge=1, description="queued + running jobs")

    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="JSON bodies of single requests")
    max_batch_bytes: int = Field(default=32 << 20, ge=1024, description="batch bodies and uploads")
    max_batch_items: int = Field(default=10_000, ge=1)
    max_line_bytes: int = Field(default=16_384, ge=256, description="one JSONL line of a batch upload")

    idempotency_ttl_s: int = Field(default=24 * 3600, ge=1)
    retry_after_s: int = Field(default=5, ge=1, description="Retry-After on 503 (Redis down)")
    sse_ping_s: float = Field(default=15.0, gt=0)
    sse_block_ms: int = Field(default=5000, ge=10)
    redis_timeout_s: float = Field(default=3.0, gt=0)

    @property
    def broker(self) -> str:
        return self.broker_url or self.redis_url

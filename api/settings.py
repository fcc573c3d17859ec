"""Settings of the API gateway (``PARLEY_API_*``), read once at start-up and injected."""

from __future__ import annotations

import ipaddress

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from engine.config import SEARCH_QUERY_MODES, SearchQueryMode
from services.egress import NetworkList
from services.redis_settings import RedisSettingsMixin, wait_replicas_field
from services.settings import MetricsPort, ParleySettings, Port, Seconds


class ApiSettings(ParleySettings, RedisSettingsMixin):
    """Where the job store and broker are, who may call, and the limits that protect the service."""

    model_config = SettingsConfigDict(
        env_prefix="PARLEY_API_", frozen=True, extra="ignore", env_nested_delimiter="__"
    )

    host: str = "127.0.0.1"
    port: Port = 8000
    redis_wait_replicas: int = wait_replicas_field(
        "a new job or batch is accepted (202) only once this many replicas hold it (Redis WAIT), else it "
        "is removed and answered 503"
    )

    # API keys as name → sha256 hex digest of the key (``parley hash-key KEY`` prints one).
    # Empty: no authentication, every caller is the owner "public" (development only).
    keys: dict[str, str] = Field(default_factory=dict)
    rate_limit_per_minute: int = Field(default=600, ge=1, description="requests per key per minute")
    max_active_jobs_per_key: int = Field(default=20_000, ge=1, description="queued + running jobs")

    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="JSON bodies of single requests")
    max_batch_bytes: int = Field(default=32 << 20, ge=1024, description="batch bodies and uploads")
    max_batch_items: int = Field(default=10_000, ge=1)
    max_line_bytes: int = Field(default=16_384, ge=256, description="one JSONL line of a batch upload")
    body_timeout_s: Seconds = Field(
        default=30.0,
        description="a request body must have arrived this long after the request began (else 408)",
    )

    idempotency_ttl_s: int = Field(default=24 * 3600, ge=1)
    idempotency_pending_ttl_s: int = Field(
        default=60,
        ge=1,
        description="how long an Idempotency-Key stays claimed by a request still in progress; a "
        "claim left by a crashed request frees the key after this",
    )
    retry_after_s: int = Field(default=5, ge=1, description="Retry-After on 503 (Redis down)")
    sse_ping_s: Seconds = 15.0
    sse_block_ms: int = Field(default=5000, ge=10)
    redis_timeout_s: Seconds = Field(
        default=3.0, description="socket timeout of every Redis call of a request (then 503)"
    )
    redis_max_connections: int = Field(
        default=100, ge=1, description="Redis connections serving requests (event streams have their own)"
    )
    max_streams_per_key: int = Field(default=32, ge=1, description="open event streams (SSE) per key")
    max_streams_per_process: int = Field(
        default=256, ge=1, description="open event streams per API process (its SSE Redis pool size)"
    )
    stream_slot_ttl_s: Seconds = Field(
        default=60.0,
        description="how long a stream's per-key slot lives in Redis unless renewed (every third of "
        "it): the slots of a crashed API process free themselves after this",
    )
    max_batch_values: int = Field(
        default=2_000_000,
        ge=1,
        description="JSON values (objects, arrays, list elements and members) in one batch body: "
        "bounds the memory a body may expand to when parsed",
    )
    max_json_depth: int = Field(default=400, ge=2, description="nesting depth of any JSON body")

    # Operator surfaces: /metrics names keys, so it is never public (see docs/security.md).
    metrics_token: SecretStr | None = Field(
        default=None,
        description="with a token, /metrics on the API port answers scrapes that send "
        "Authorization: Bearer <token>; without one it is not served there",
    )
    metrics_port: MetricsPort = Field(
        default=9100, description="separate /metrics port of the gateway; 0 = none"
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="bind address of the separate /metrics port (loopback by default)"
    )

    # Who may reach the service and what a client may ask for (see docs/security.md).
    anonymous: bool = Field(
        default=False,
        description="serve without API keys on a non-loopback address (every caller is 'public')",
    )
    auth_failures_per_minute: int = Field(
        default=20, ge=1, description="failed authentications per client address before 429"
    )
    llm_endpoints: list[str] = Field(
        default_factory=list,
        description="names of the LLM endpoints clients may choose (team: [{endpoint: NAME}]); the "
        "workers' PARLEY_LLM_ENDPOINTS holds their URLs and keys, which the gateway never needs",
    )
    client_url_networks: NetworkList = Field(
        default_factory=list,
        description="with allow_client_urls: non-public networks (CIDR) client URLs may still name, "
        "e.g. a lab's LLM servers; loopback, private and link-local addresses are refused otherwise",
    )
    allow_client_urls: bool = Field(
        default=False,
        description="accept base_url/model in client configs; such agents are never sent an operator key",
    )
    search_query_modes: list[SearchQueryMode] = Field(
        default_factory=lambda: list(SEARCH_QUERY_MODES),
        description="the search_query modes clients may ask for (JSON list); passage has the model write a "
        "search passage before retrieval (one more call, charged to the job); 'question' must stay. List "
        "the same as PARLEY_WORKER_SEARCH_QUERY_MODES",
    )
    max_debate_searches: int = Field(
        default=1,
        ge=0,
        le=5,
        description="most searches each debater of a job may write during the debate (debate_search."
        "per_agent; each is one LLM call and one retrieval, charged to the job); 0 refuses them",
    )
    budget_calls_default: int = Field(default=200, ge=1, description="LLM calls per job unless asked less")
    budget_calls_max: int = Field(default=1000, ge=1, description="most LLM calls a client may ask for")
    budget_tokens_default: int = Field(
        default=200_000, ge=1, description="tokens per job unless the client asks for less"
    )
    budget_tokens_max: int = Field(default=2_000_000, ge=1, description="most tokens a client may ask for")
    storage_bytes_per_key: int | None = Field(
        default=None,
        ge=1024,
        description="bytes of Redis one key may fill with its jobs, results, events, batches and "
        "idempotency records; unset = storage_share of Redis maxmemory (no cap without maxmemory)",
    )
    storage_share: float = Field(
        default=0.25, gt=0, le=1, description="share of Redis maxmemory one key may fill by default"
    )
    daily_token_quota: int | None = Field(
        default=None, ge=1, description="tokens per key per UTC day (None = no quota)"
    )
    daily_token_quotas: dict[str, int] = Field(
        default_factory=dict, description="per-key overrides of daily_token_quota, by key name"
    )

    @model_validator(mode="after")
    def _search_query_modes(self) -> ApiSettings:
        if "question" not in self.search_query_modes:
            raise ValueError("search_query_modes must keep 'question' (every config's default)")
        return self

    @model_validator(mode="after")
    def _budgets(self) -> ApiSettings:
        if self.budget_calls_default > self.budget_calls_max:
            raise ValueError("budget_calls_default must not exceed budget_calls_max")
        if self.budget_tokens_default > self.budget_tokens_max:
            raise ValueError("budget_tokens_default must not exceed budget_tokens_max")
        return self

    def token_quota(self, owner: str) -> int | None:
        return self.daily_token_quotas.get(owner, self.daily_token_quota)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_error(settings: ApiSettings, host: str) -> str | None:
    """Why serving on ``host`` with these settings is refused, or None: closed by default."""
    if settings.keys or settings.anonymous or is_loopback(host):
        return None
    return (
        f"refusing to serve on {host} without API keys: set PARLEY_API_KEYS (hashes from "
        "`parley hash-key KEY`), bind a loopback address, or set PARLEY_API_ANONYMOUS=true to "
        "serve everyone as one anonymous owner"
    )

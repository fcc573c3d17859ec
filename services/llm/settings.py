"""How Parley reaches its chat-completion servers (``PARLEY_LLM_*``), read by every process that calls a
model: the worker, the in-process runner and the CLI."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.chat_model import ENDPOINT_NAME as ENDPOINT_NAME
from services.llm.replicas import split_base_urls
from services.settings import ParleySettings, Port, RetryAttempts, Seconds, SecondsOrZero, default_data_dir

if TYPE_CHECKING:
    from services.llm.embedded import ServerOptions

ROLES = ("debater", "judge", "summarizer")

REPLICAS_HELP = "; several servers of one model: comma-separated, calls spread over the healthy ones"


def _check_base_urls(value: str | None) -> str | None:
    """An operator's base URL, or a comma-separated list of replicas of one model, checked at load."""
    if value is None:
        return None
    return ",".join(split_base_urls(value))


Role = Literal["debater", "judge", "summarizer"]


class EndpointOverride(ParleySettings):
    """A per-role override of the LLM endpoint; unset fields fall back to the global ones."""

    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL for this role; unset = the global one" + REPLICAS_HELP,
    )
    api_key: SecretStr | None = None
    model: str | None = None
    fallback: str | None = Field(
        default=None,
        description="judge and summarizer: the name of a configured endpoint (PARLEY_LLM_ENDPOINTS) "
        "that answers a call this role's endpoint failed; the result marks the step degraded",
    )

    _base_urls = field_validator("base_url")(classmethod(lambda cls, v: _check_base_urls(v)))


class NamedEndpoint(BaseModel):
    """An LLM endpoint the operator allows debates to use, referred to by name in configs.

    The key is sent only to this endpoint's ``base_url``: a config names the endpoint, never a URL or
    a key, so a client can choose among the operator's models without ever steering where a request
    (and its credentials) goes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(description="OpenAI-compatible base URL" + REPLICAS_HELP)
    model: str = Field(description="model name sent to this endpoint")
    api_key: SecretStr | None = None

    _base_urls = field_validator("base_url")(classmethod(lambda cls, v: _check_base_urls(v)))


class LLMSettings(ParleySettings):
    """How to reach the chat-completion servers (``PARLEY_LLM_*``).

    Leave ``base_url`` unset to use the embedded llama.cpp server that Parley starts itself
    (``parley llm serve`` runs the same server on its own, e.g. as a deployment's ``llm`` service).
    Per-role overrides: ``PARLEY_LLM_DEBATER__BASE_URL``, ``PARLEY_LLM_JUDGE__MODEL``, … .
    """

    model_config = SettingsConfigDict(
        env_prefix="PARLEY_LLM_", frozen=True, extra="ignore", env_nested_delimiter="__"
    )

    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL, e.g. http://host:8000/v1"
        + REPLICAS_HELP
        + " (least outstanding requests, one debate's calls to one replica)",
    )
    api_key: SecretStr | None = None
    ca_file: Path | None = Field(
        default=None,
        description="CA certificate (PEM) that signs https:// LLM servers' certificates (a lab's own "
        "CA); unset = the system's CAs",
    )
    model: str = "local"
    timeout_s: Seconds = 120.0
    connect_timeout_s: Seconds = 5.0
    timeout_grace_s: Annotated[SecondsOrZero, Field(le=600)] = Field(
        default=10.0,
        description="a call past its timeout fails at once, but its request runs on this long so the "
        "usage the server reports is charged instead of the worst case (0: cut at the timeout; a debate "
        "that has ended waits at most 10 s for such replies)",
    )
    max_attempts: RetryAttempts = Field(
        default=100, description="attempts per call for connection errors, 429 and 5xx"
    )
    retry_window_s: Seconds = Field(
        default=300.0,
        description="an LLM server unavailable for longer than this fails the call (shorter: waited out)",
    )
    backoff_base_s: SecondsOrZero = 0.5
    backoff_max_s: SecondsOrZero = 20.0
    max_concurrency: int = Field(
        default=4, ge=1, description="in-flight requests per server (each replica) and process"
    )
    replica_cooldown_s: Seconds = Field(
        default=5.0,
        description="a replica that failed a call is out this long, doubled per consecutive failure, "
        "then probed by a real call",
    )
    replica_cooldown_max_s: Seconds = Field(
        default=120.0, description="the longest a failing replica stays out before it is probed"
    )
    replica_spill_gap: int = Field(
        default=2,
        ge=1,
        description="a call leaves its debate's replica (the debate stays bound) when that one has this "
        "many more calls in flight than the least loaded, all worker processes counted; raise it "
        "towards the replicas' slots where their prompt cache matters more than waiting",
    )
    max_tokens: int = Field(default=512, ge=1)
    structured_output: Literal["json_schema", "json_object", "off"] = Field(
        default="json_schema",
        description="response_format form for schema-constrained replies (json_object: llama-cpp-python)",
    )
    debater: EndpointOverride = Field(default_factory=EndpointOverride)
    judge: EndpointOverride = Field(default_factory=EndpointOverride)
    summarizer: EndpointOverride = Field(default_factory=EndpointOverride)
    endpoints: dict[str, NamedEndpoint] = Field(
        default_factory=dict,
        description='named endpoints configs may use (team: [{"endpoint": NAME}]), as JSON: '
        '{"big": {"base_url": ..., "model": ..., "api_key": ...}}; each key goes only to its own URL',
    )
    # Embedded model (used only when base_url is unset).
    embedded_model: str = Field(
        default="qwen2.5-coder-1.5b",
        description="embedded model when base_url is unset: qwen2.5-coder-1.5b, qwen2.5-coder-0.5b (the "
        "tests' model), smollm2-135m (`parley models` lists them), or the path of a .gguf chat model "
        "(its header is checked before the server starts)",
    )
    embedded_threads: int | None = Field(default=None, ge=1)
    embedded_ctx: int = Field(default=4096, ge=512, description="context tokens per slot")
    embedded_server: Literal["auto", "xllamacpp", "llama-server"] = Field(
        default="auto",
        description="xllamacpp: llama.cpp's server from the prebuilt wheel; llama-server: llama.cpp's "
        "own, compiled by `make native-llm` or shipped in the parley-llm image; auto: llama-server "
        "where there is one, else xllamacpp",
    )
    embedded_slots: int = Field(
        default=4,
        ge=1,
        le=64,
        description="KV-cache slots of the server, decoded together (the server picks the idle slot "
        "with the longest cached prefix); `parley up` sets 2 x its worker processes",
    )
    embedded_cache_ram_mib: int = Field(
        default=512, ge=0, description="host-memory prompt cache bound of the server (MiB; 0 = off)"
    )
    embedded_cache_reuse: int = Field(
        default=0,
        ge=0,
        description="reuse cached chunks of at least this many tokens past the common prefix by "
        "shifting them (approximate attention for the moved chunks; 0 = off)",
    )
    embedded_server_bin: Path | None = Field(
        default=None, description="llama-server binary; unset = the virtualenv's, then PATH"
    )
    serve_host: str = Field(
        default="127.0.0.1", description="`parley llm serve`: the address it listens on (0.0.0.0: all)"
    )
    serve_port: Port = Field(default=8080, description="`parley llm serve`: its port")
    cache_dir: Path = Field(default_factory=lambda: default_data_dir() / "models")

    _base_urls = field_validator("base_url")(classmethod(lambda cls, v: _check_base_urls(v)))

    @field_validator("embedded_model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        # A packaged model's name (a deprecated alias becomes the name it stands for, with a
        # warning) or a path, checked when the server is prepared; anything else is refused here.
        from services.llm.registry import UnknownModelError, resolve_model_name

        try:
            return resolve_model_name(value)
        except UnknownModelError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("endpoints")
    @classmethod
    def _endpoint_names(cls, value: dict[str, NamedEndpoint]) -> dict[str, NamedEndpoint]:
        bad = [name for name in value if not re.match(ENDPOINT_NAME, name)]
        if bad:
            raise ValueError(f"endpoint names must match {ENDPOINT_NAME}: {bad}")
        return value

    @model_validator(mode="after")
    def _fallbacks_are_configured(self) -> LLMSettings:
        # Checked where the settings load (the worker's start, parley ask, parley eval), not when a
        # judge first fails in the middle of a debate.
        if self.debater.fallback is not None:
            raise ValueError(
                "debater.fallback: only the judge and the summarizer take a fallback endpoint (a "
                "debater's answer from another model would change the debate, not its verdict)"
            )
        for role in ("judge", "summarizer"):
            name = getattr(self, role).fallback
            if name is not None and name not in self.endpoints:
                known = ", ".join(sorted(self.endpoints)) or "none configured"
                raise ValueError(
                    f"{role}.fallback: no endpoint named {name!r} in PARLEY_LLM_ENDPOINTS (known: {known})"
                )
        return self

    def embedded_server_options(self) -> ServerOptions:
        """The embedded server's options (``prepare_server``'s keywords) as ``PARLEY_LLM_EMBEDDED_*`` set
        them: the one place that says which option each of those variables is."""
        return {
            "n_ctx": self.embedded_ctx,
            "n_threads": self.embedded_threads,
            "kind": self.embedded_server,
            "slots": self.embedded_slots,
            "cache_ram_mib": self.embedded_cache_ram_mib,
            "cache_reuse": self.embedded_cache_reuse,
            "binary": self.embedded_server_bin,
        }


@dataclass(frozen=True)
class BatchDefaults:
    """How ``parley up`` (and the compose file's defaults) run batches against the embedded server."""

    worker_concurrency: int  # debates at once: the worker's pool processes
    slots: int  # the server's KV-cache slots
    max_concurrency: int  # LLM calls in flight per worker process


def batch_defaults(cpus: int | None = None) -> BatchDefaults:
    """The worker and server setting for batches on this many CPUs, as measured by ``bench.throughput``.

    One debate per core (at least 2, at most 8), two KV-cache slots per debate (a round's two
    debaters decoded together) and two calls in flight per worker process, so workers x calls =
    slots and calls beyond the slots wait in the client, where no read timeout runs. On the 2-core
    machine, side by side on the same 8 questions, 4 debates on 16 slots gave the same questions per
    hour as this (2 debates on 4 slots: 0.99x, the same share of prompt tokens served from cache):
    the server's arithmetic is the bound on a CPU, so the setting with fewer processes and less KV
    memory is the default. The 1.5B on 100 questions, native build, agreed: 4 debates on 8 slots ran
    at 0.98x this setting's questions per hour over the first 83 questions.
    """
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    workers = max(2, min(8, n))
    return BatchDefaults(workers, min(32, 2 * workers), 2)

"""What a worker process needs to run jobs (``WorkerRuntime``): its settings and the factories that
give every job fresh async clients: the role models (client URLs reach public addresses only) and the
retriever client that builds pools."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from debate_worker.job_errors import PoolUnavailable
from debate_worker.pool_timing import PoolTiming
from debate_worker.worker_settings import WorkerSettings
from engine.context import RoleModels
from services.call_cache import CachedRoleModels, RedisCallStore
from services.egress import PublicOnlyTransport
from services.jobstore import RedisJobStore
from services.jobstore.settings import RetentionSettings
from services.knowledge import PoolBuilder
from services.llm import LLMSettings, ServedModel, build_role_models, model_identity
from services.observability import telemetry
from services.redis_connect import async_client
from services.retriever_client import RetrieverClient
from services.settings import RetrieverClientSettings
from services.tls import client_verify

# What a fresh pool is assumed to take before this process has built one (dense + BM25 + web search).
DEFAULT_POOL_S = 2.0


class ClosableRoleModels(RoleModels, Protocol):
    async def aclose(self) -> None: ...


class ClosablePoolBuilder(PoolBuilder, Protocol):
    async def aclose(self) -> None: ...


def _default_models(
    llm: LLMSettings, served: ServedModel | None, client_url_networks: list[str]
) -> ClosableRoleModels:
    # A job's config comes from a client: a URL its team gives reaches public addresses only.
    guard = PublicOnlyTransport(client_url_networks)
    return build_role_models(llm, served=served, client_url_transport=guard)


def _default_pool_builder(retriever: RetrieverClientSettings) -> ClosablePoolBuilder:
    if not retriever.url:
        raise PoolUnavailable("PARLEY_RETRIEVER_URL is not set; workers reach knowledge only through it")

    verify = client_verify(retriever.ca_file)
    return RetrieverClient(
        retriever.url,
        timeout_s=retriever.client_timeout_s,
        max_attempts=retriever.client_max_attempts,
        retry_window_s=retriever.client_retry_window_s,
        transport=telemetry.client_transport(verify),  # carries the job's trace to the retriever
        token=retriever.token.get_secret_value() if retriever.token else None,
        verify=verify,
    )


@dataclass
class WorkerRuntime:
    """What a worker process needs to run jobs; factories so that every job gets fresh async clients."""

    settings: WorkerSettings
    llm: LLMSettings
    retriever: RetrieverClientSettings
    # Set by ``parley worker`` when it serves the embedded model itself.
    served: ServedModel | None = None
    llm_base_url: str | None = None
    models_factory: Callable[[], ClosableRoleModels] | None = None
    pool_factory: Callable[[], ClosablePoolBuilder] | None = None
    hostname: str = field(default_factory=socket.gethostname)
    # How long this process's uncached pools take: cached ones are held back that long.
    pool_timing: PoolTiming = field(default_factory=lambda: PoolTiming(DEFAULT_POOL_S))
    # The job store's retention (PARLEY_JOB_TTL_S): the gateway reads the same variable.
    retention: RetentionSettings = field(default_factory=RetentionSettings)

    @classmethod
    def from_env(cls, settings: WorkerSettings | None = None) -> WorkerRuntime:
        return cls(settings or WorkerSettings(), LLMSettings(), RetrieverClientSettings())

    def store(self) -> RedisJobStore:
        return RedisJobStore.from_url(
            self.settings.redis_spec(),
            prefix=self.settings.key_prefix,
            ttl_s=self.retention.job_ttl_s,
            wait_replicas=self.settings.redis_wait_replicas,
            wait_timeout_ms=self.settings.redis_wait_timeout_ms,
        )

    def models(self) -> ClosableRoleModels:
        if self.models_factory is not None:
            return self.models_factory()
        if self.served is None and self.llm_base_url and self.llm_base_url != self.llm.base_url:
            # ``parley worker --llm-url``: that server for every role, the configured model name.
            served: ServedModel | None = ServedModel(self.llm_base_url, self.llm.model)
        else:
            served = self.served
        return _default_models(self.llm, served, self.settings.client_url_networks)

    def cached_models(self, models: ClosableRoleModels, owner: str) -> tuple[ClosableRoleModels, Any]:
        """``models`` behind the call cache when ``PARLEY_WORKER_CALL_CACHE`` is on (with the Redis
        client to close after the job), else as they are. Replies are kept per owner: a key never
        replays another key's call, which would tell it that someone else asked the same."""
        if not self.settings.call_cache:
            return models, None
        client = async_client(self.settings.redis_spec(), socket_timeout=5, socket_connect_timeout=5)
        store = RedisCallStore(
            client,
            prefix=f"{self.settings.key_prefix}:",
            max_entries=self.settings.call_cache_max_entries,
            ttl_s=self.settings.call_cache_ttl_s,
        )
        cached: ClosableRoleModels = CachedRoleModels(
            models, store, identity_of=lambda model: f"{owner}|{model_identity(model)}"
        )
        return cached, client

    def pool_builder(self) -> ClosablePoolBuilder:
        if self.pool_factory is not None:
            return self.pool_factory()
        return _default_pool_builder(self.retriever)

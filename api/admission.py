"""What a client's debate config may ask for: the operator's endpoints by name, budgets within limits.

A config that arrives over HTTP is the client's, and client input never chooses where a worker
connects, which credentials it sends, or how much it spends beyond the operator's limits. The engine
accepts URLs and model names (the operator's CLI needs them); this gate refuses them for clients
unless the operator allows client URLs (then no operator key is ever sent to them, see
``services.llm.factory``), checks endpoint names against the ones the operator lists, refuses a
``search_query`` mode the operator did not enable (``PARLEY_API_SEARCH_QUERY_MODES``: a client picks a
mode by name, the prompt stays the engine's), and fills in or bounds the per-job budgets. Every
refusal is a 422 problem naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from api.errors import Refused, StorageFull, StorageTooLarge
from api.settings import ApiSettings
from engine.config import DebateConfig
from services.egress import parse_networks, refusal_as_written
from services.jobstore import BatchRecord, JobRecord, JobStore, stored_size
from services.observability.metrics import REFUSALS


def refused(field: str, msg: str) -> Refused:
    return Refused(field, msg)


def private_target(url: str, allowed: Sequence[str]) -> str | None:
    """Why a client URL may not be called (a loopback, private, link-local or otherwise non-public
    address the operator did not list, or a local name), or None. Checked on the URL as written, for a
    clear 422 at once; a name that resolves to such an address is refused by the worker, which checks
    the address it dials (``services.egress``)."""
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return None  # not a URL httpx can call either: the job fails at the worker, naming it
    return refusal_as_written(host, parse_networks(allowed), "PARLEY_API_CLIENT_URL_NETWORKS")


def admit_pool(config: DebateConfig, pool: list[Any] | None, *, field: str = "pool") -> None:
    """A pool brought with a question must be one the protocol would use."""
    if pool is None:
        return
    if not config.needs_pool:
        raise refused(field, f"protocol {config.protocol!r} with knowledge={config.knowledge!r} uses no pool")


def admit_config(config: DebateConfig, settings: ApiSettings, *, field: str = "config") -> DebateConfig:
    """The config as it will run (budgets filled in), or ``Refused`` naming the refused field."""
    known = ", ".join(settings.llm_endpoints) or "none configured"
    for i, spec in enumerate(config.team or []):
        where = f"{field}.team.{i}"
        why = private_target(spec.base_url, settings.client_url_networks) if spec.base_url else None
        if why is not None and settings.allow_client_urls:
            raise refused(f"{where}.base_url", why)
        if spec.base_url is not None and not settings.allow_client_urls:
            raise refused(
                f"{where}.base_url",
                f"clients cannot choose an LLM URL; name one of the operator's endpoints with "
                f"'endpoint' (known: {known})",
            )
        if spec.model is not None and spec.base_url is None:
            raise refused(
                f"{where}.model",
                f"the model of an operator endpoint is the operator's; name an endpoint with "
                f"'endpoint' (known: {known})",
            )
        if spec.endpoint is not None and spec.endpoint not in settings.llm_endpoints:
            raise refused(f"{where}.endpoint", f"no LLM endpoint named {spec.endpoint!r} (known: {known})")
    if config.search_query not in settings.search_query_modes:
        raise refused(
            f"{field}.search_query",
            f"search_query {config.search_query!r} is not enabled on this deployment (enabled: "
            f"{', '.join(settings.search_query_modes)})",
        )
    asked_searches = config.debate_search.per_agent
    if asked_searches > settings.max_debate_searches:
        raise refused(
            f"{field}.debate_search.per_agent",
            f"{asked_searches} searches per debater is above this deployment's limit of "
            f"{settings.max_debate_searches}",
        )
    update: dict[str, Any] = {}
    for name, default, limit in (
        ("budget_calls", settings.budget_calls_default, settings.budget_calls_max),
        ("budget_tokens", settings.budget_tokens_default, settings.budget_tokens_max),
    ):
        asked = getattr(config, name)
        if asked is None:
            update[name] = default
        elif asked > limit:
            raise refused(f"{field}.{name}", f"{asked} is above this deployment's limit of {limit}")
    return config.model_copy(update=update) if update else config


async def storage_cap(redis: aioredis.Redis, settings: ApiSettings) -> int | None:
    """The bytes one key may fill: the operator's setting, else its share of Redis ``maxmemory``
    (None when neither is known: a managed Redis that refuses CONFIG, or no maxmemory)."""
    if settings.storage_bytes_per_key is not None:
        return settings.storage_bytes_per_key
    try:
        reply = await redis.config_get("maxmemory")
    except Exception:  # CONFIG is often disabled on managed Redis: no default then
        return None
    maxmemory = int(reply.get("maxmemory") or 0)
    return int(maxmemory * settings.storage_share) if maxmemory else None


async def admit_storage(
    store: JobStore, cap: int | None, owner: str, jobs: Sequence[JobRecord], batch: BatchRecord | None = None
) -> None:
    """413 when the request alone exceeds the key's storage cap, 429 when what the key keeps plus the
    request would; other keys are unaffected (each has its own cap)."""
    if cap is None:
        return
    adding = stored_size(jobs, batch)
    if adding > cap:
        REFUSALS.labels("storage", owner).inc()
        raise StorageTooLarge(
            f"this request would store about {adding} bytes, more than this key's storage limit of {cap}"
        )
    kept, frees_in = await store.stored_bytes(owner)
    if kept + adding > cap:
        REFUSALS.labels("storage", owner).inc()
        raise StorageFull(
            f"this key keeps about {kept} bytes in the job store; this request adds about {adding}, "
            f"over its storage limit of {cap}. Space frees as old jobs expire, or when you delete "
            "finished ones (DELETE /v1/debates/{id}, DELETE /v1/batches/{id}).",
            retry_after_s=frees_in,
        )

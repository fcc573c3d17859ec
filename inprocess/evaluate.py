"""``parley eval`` in this process: the harness on the configured LLM endpoint (or the embedded model)
and, where a run needs pools, the retrieval service or the in-process index.

The root command hands ``evaluate_in_process`` to ``parley eval`` (the harness never imports this
runner, so it never reaches the retriever). The harness loads inside the function, so ``parley --help``
stays instant.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from typing import Any

from evaluation.settings import EvalSettings
from inprocess.local_debate import llm_endpoint, pool_builder
from inprocess.provenance import collect as collect_provenance
from retriever.settings import RetrieverSettings
from services.call_cache import CachedPoolBuilder, CachedRoleModels, CacheStats, SqliteCallStore
from services.llm import LLMSettings, build_role_models, check_models_served, model_identity
from services.settings import RetrieverClientSettings


async def evaluate_in_process(request: Any, console: Any, judge: Any, evaluate: Any) -> Any:
    """The configured LLM endpoint (or the embedded model) and, if any run needs a pool the dataset
    does not carry, the retriever (service or in-process index) — the same resolution ``parley ask``
    uses. A dataset with its own pools (``--pool file``) never starts the retriever."""
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.datasets import load_dataset
    from evaluation.harness import plan_request, resolve_pool_source
    from evaluation.runner import needs_retriever

    specs = plan_request(request)
    dataset = load_dataset(request.dataset, fmt=request.fmt, on_error=request.on_error, limit=request.limit)
    pool_source = resolve_pool_source(request.pool, dataset)
    llm_settings = LLMSettings(**(request.llm_overrides or {}))
    if llm_settings.base_url:
        check_models_served(llm_settings)  # a model the server does not serve: refused before any work
    async with contextlib.AsyncExitStack() as stack:
        builder = None
        if needs_retriever(specs, dataset.items, pool_source):
            builder = await stack.enter_async_context(pool_builder(console))
        served = stack.enter_context(llm_endpoint(llm_settings, console))
        service = RetrieverClientSettings().url
        local_index = RetrieverSettings() if builder is not None and not service else None
        provenance = collect_provenance(llm_settings, served, local_index, retriever_url=service)
        request = replace(request, provenance=provenance)
        models: Any = build_role_models(llm_settings, served=served)
        stack.push_async_callback(models.aclose)
        if request.cache != "off":
            settings = EvalSettings()
            store = SqliteCallStore(settings.cache_path, settings.cache_max_mb * 2**20)
            stack.callback(store.close)
            models = CachedRoleModels(models, store, only=request.cache == "only", identity_of=model_identity)
            if builder is not None:
                # Pools are cached too (retrieval is deterministic for one index): a replay in a fresh
                # folder, and the searches a debate makes, read the index no more than the first run.
                identity = json.dumps(provenance.get("index"), sort_keys=True)
                builder = CachedPoolBuilder(builder, store, identity)
            stack.callback(report_cache, console, models.stats, store, builder)
        return await evaluate(request, models=models, pool_builder=builder, judge=judge)


def report_cache(console: Any, stats: CacheStats, store: SqliteCallStore, pools: Any = None) -> None:
    rate = f"{stats.hit_rate:.1%}" if stats.hit_rate is not None else "–"
    retrievals = ""
    if isinstance(pools, CachedPoolBuilder):
        retrievals = f"; pools: {pools.stats.hits} replayed, {pools.stats.misses} retrieved"
    console.print(
        f"[dim]call cache: {stats.hits} replayed, {stats.misses} called ({rate} replayed){retrievals}; "
        f"{store.size_bytes / 2**20:.1f} MB at {store.path}[/dim]"
    )

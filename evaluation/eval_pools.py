"""The knowledge pools of an evaluation: built once per item (and ``search_key``) for every knowledge
run, cached in the output folder, or the pool an item was published with, cut to each run's size."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.config import DebateConfig
from engine.context import RoleModels
from engine.result import TranscriptRecord
from engine.search_passage import prepare_knowledge, search_key
from evaluation.items import Item
from evaluation.progress import make_progress
from evaluation.run_loop import EvalOptions, PoolSource, describe_error
from evaluation.store import QUESTION_POOLS, RunSpec, Workspace
from services.knowledge import KnowledgePool, PoolBuilder


def needs_pool(spec: RunSpec) -> bool:
    return DebateConfig.model_validate(spec.config).needs_pool


def own_pool_ids(items: Sequence[Item], pool_source: PoolSource) -> set[str]:
    """Items that debate on the pool published with them (``--pool file``)."""
    return {it.id for it in items if it.pool is not None} if pool_source == "file" else set()


def needs_retriever(specs: Sequence[RunSpec], items: Sequence[Item], pool_source: PoolSource) -> bool:
    """Whether any run needs a pool that only the retriever can build."""
    if not any(needs_pool(s) for s in specs):
        return False
    own = own_pool_ids(items, pool_source)
    return any(it.id not in own for it in items)


@dataclass
class BuiltPools:
    """The pools built for the knowledge runs, by ``search_key`` then item id, with the calls that
    wrote their search passages, and why an item has none."""

    pools: dict[str, dict[str, KnowledgePool]] = field(default_factory=dict)
    searches: dict[str, dict[str, TranscriptRecord]] = field(default_factory=dict)
    errors: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(
        self,
        key: str,
        pools: dict[str, KnowledgePool],
        searches: dict[str, TranscriptRecord],
        errors: dict[str, str],
    ) -> None:
        self.pools[key], self.searches[key], self.errors[key] = pools, searches, errors


def pool_for_run(
    item: Item, config: DebateConfig, pools: dict[str, KnowledgePool], own: set[str]
) -> KnowledgePool:
    """The pool a run debates on: the item's own pool cut to the run's k_wiki/k_web (the reference
    code's wiki_num/google_num), else the built (or cached) one."""
    if item.id in own and item.pool is not None:
        return item.pool.limited(config.k_wiki, config.k_web)
    return pools[item.id]


async def ensure_pools(
    ws: Workspace,
    items: Sequence[Item],
    builder: PoolBuilder,
    *,
    k_wiki: int,
    k_web: int,
    concurrency: int = 1,
    progress: bool = True,
    passage: DebateConfig | None = None,
    models: RoleModels | None = None,
) -> tuple[dict[str, KnowledgePool], dict[str, str], dict[str, TranscriptRecord]]:
    """Build the pools that are not cached yet; returns (pools, errors, search passage calls), each by
    item id. With ``passage`` (a config with ``search_query=passage``) ``models`` first write each
    item's search passage as that config says, and the pool is searched with it; the two are cached
    together under the config's ``search_key``."""
    key = search_key(passage) if passage is not None else QUESTION_POOLS
    cached = ws.load_pools_with_search(key)
    pools = {item_id: pool for item_id, (pool, _) in cached.items()}
    searches = {item_id: rec for item_id, (_, rec) in cached.items() if rec is not None}
    errors: dict[str, str] = {}
    todo = [it for it in items if it.id not in pools]
    label = "knowledge pools" if passage is None else "search passages and pools"
    bar = make_progress(label, len(items), len(items) - len(todo), progress)
    sem = asyncio.Semaphore(max(1, concurrency))

    async def build(item: Item) -> None:
        async def build_pool(text: str | None) -> KnowledgePool:
            return await builder.build_pool(item.question, k_wiki=k_wiki, k_web=k_web, search_text=text)

        async with sem:
            try:
                pool, search = await prepare_knowledge(item.question, passage, models, build_pool)
            except Exception as exc:  # any failure is recorded per item and retried on resume
                errors[item.id] = describe_error(exc)
            else:
                ws.save_pool(item.id, pool, key=key, search=search)
                pools[item.id] = pool
                if search is not None:
                    searches[item.id] = search
            bar.update(1)

    try:
        await asyncio.gather(*(build(it) for it in todo))
    finally:
        bar.close()
    return pools, errors, searches


async def build_pools(
    ws: Workspace,
    items: Sequence[Item],
    runs: Sequence[RunSpec],
    builder: PoolBuilder,
    models: RoleModels,
    opts: EvalOptions,
) -> BuiltPools:
    """One pool per item and ``search_key`` for the knowledge runs, as deep as the deepest of them."""
    built = BuiltPools()
    groups: dict[str, list[DebateConfig]] = {}
    for spec in runs:
        cfg = DebateConfig.model_validate(spec.config)
        groups.setdefault(search_key(cfg), []).append(cfg)
    for key, cfgs in groups.items():
        # The passage is written once for all the runs of a key, outside any run's budget: each run
        # counts it (its transcript starts with the call), so each run's budget does too.
        first = cfgs[0]
        passage = (
            first.model_copy(update={"budget_calls": None, "budget_tokens": None})
            if key != QUESTION_POOLS
            else None
        )
        pools, errors, searches = await ensure_pools(
            ws,
            items,
            builder,
            k_wiki=max(c.k_wiki for c in cfgs),
            k_web=max(c.k_web for c in cfgs),
            concurrency=opts.concurrency,
            progress=opts.progress,
            passage=passage,
            models=models,
        )
        built.add(key, pools, searches, errors)
    return built

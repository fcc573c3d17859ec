"""In-process evaluation: every run (protocol × prompt style) over the same items and the same pools.

Pools are built once per item and cached in the output folder, so every protocol debates on equal
terms and a resumed or extended evaluation does not query the retriever again. Runs with
``search_query=passage`` share pools of their own (one per item and ``search_key``): the model writes
each item's search passage once, the pool is searched with it, and both are cached together; every run
that debates on such a pool carries the passage's call at the head of its transcript, so its calls and
tokens count what the run would cost on its own (the passage was written, and paid for, once).

An item that came with its own pool (MADKE's published files) debates on that pool, cut to each
run's k_wiki/k_web (no passage is written for it), unless the evaluation asks for the retriever
(``pool_source="retriever"``); the cache never replaces it. Each item's result is scored and
appended as soon as it finishes; a failed item (LLM down, bad question) is recorded with its reason
and retried on the next invocation. When many items fail in a row the run stops early: the endpoint
is most likely down, and burning through the dataset would only record failures.

The pools are built by ``eval_pools``, every run's item loop is ``run_loop``'s, and the same-budget
vote is ``same_budget``'s; this module runs the debates.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.config import DebateConfig
from engine.context import RoleModels
from engine.runner import run_debate
from engine.search_passage import search_key
from evaluation.eval_pools import (
    BuiltPools,
    build_pools,
    needs_pool,
    needs_retriever,
    own_pool_ids,
    pool_for_run,
)
from evaluation.items import Item
from evaluation.judge import AnswerJudge
from evaluation.run_loop import EvalOptions, Produced, RunTally, describe_error, run_items
from evaluation.same_budget import run_same_budget
from evaluation.store import RunSpec, Workspace
from services.knowledge import PoolBuilder, empty_pool

# ``parley eval`` in this process (inprocess.evaluate) asks it before it starts a retriever.
__all__ = ["needs_retriever", "run_in_process"]


async def run_in_process(
    ws: Workspace,
    items: Sequence[Item],
    runs: Sequence[RunSpec],
    models: RoleModels,
    *,
    pool_builder: PoolBuilder | None = None,
    judge: AnswerJudge | None = None,
    options: EvalOptions | None = None,
) -> list[RunTally]:
    """Run every spec over ``items`` in turn, skipping items that already have an ok result."""
    opts = options or EvalOptions()
    built = BuiltPools()
    own = own_pool_ids(items, opts.pool_source)
    knowledge_runs = [s for s in runs if needs_pool(s) and s.budget_of is None]
    to_retrieve = [it for it in items if it.id not in own]
    if knowledge_runs and to_retrieve:
        if pool_builder is None:
            raise ValueError("these protocols use knowledge, but no pool builder was given")
        built = await build_pools(ws, to_retrieve, knowledge_runs, pool_builder, models, opts)
    tallies = []
    # Same-budget vote runs spend what their debate spent, so they run after every debate.
    for spec in sorted(runs, key=lambda s: s.budget_of is not None):
        if spec.budget_of is not None:
            tallies.append(await run_same_budget(ws, items, spec, models, judge, opts))
            continue
        tallies.append(
            await _run_one(ws, items, spec, models, built, needs_pool(spec), judge, opts, own, pool_builder)
        )
    return tallies


async def _run_one(
    ws: Workspace,
    items: Sequence[Item],
    spec: RunSpec,
    models: RoleModels,
    built: BuiltPools,
    uses_pool: bool,
    judge: AnswerJudge | None,
    opts: EvalOptions,
    own: set[str] | None = None,
    searcher: PoolBuilder | None = None,
) -> RunTally:
    config = DebateConfig.model_validate(spec.config)
    own_ids = own or set()
    key = search_key(config)
    pools = built.pools.get(key, {})
    searches = built.searches.get(key, {})
    pool_errors = built.errors.get(key, {})

    async def debate(item: Item) -> Produced:
        if uses_pool and item.id not in pools and item.id not in own_ids:
            return None, f"knowledge pool: {pool_errors.get(item.id, 'not built')}", {}
        pool = pool_for_run(item, config, pools, own_ids) if uses_pool else empty_pool(item.question)
        # An item's own pool was not searched: no passage was written for it.
        search = searches.get(item.id) if uses_pool and item.id not in own_ids else None
        try:
            result = await run_debate(
                item.question,
                pool,
                config,
                models,
                gold=item.answers,
                search=search,
                # The debaters search what the pool was built from; a dataset's own pool is not searched.
                searcher=searcher if uses_pool and item.id not in own_ids else None,
            )
            return result, None, {}
        except Exception as exc:  # recorded with its reason and retried on resume
            return None, describe_error(exc), {}

    return await run_items(ws, items, spec, debate, judge, opts)

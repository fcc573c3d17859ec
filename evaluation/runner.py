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
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.answers import answers_agree, majority_vote
from engine.config import DebateConfig
from engine.context import RoleModels
from engine.result import DebateResult, TranscriptRecord, Usage
from engine.runner import run_debate
from engine.search_passage import prepare_knowledge, search_key
from evaluation.datasets import Item
from evaluation.judge import AnswerJudge, JudgeVerdict
from evaluation.metrics import is_consistent
from evaluation.progress import make_progress
from evaluation.scoring import PrimaryMetric, score_answer
from evaluation.store import QUESTION_POOLS, Invocation, ResultRecord, RunSpec, Workspace, now_iso
from services.knowledge import KnowledgePool, PoolBuilder, empty_pool

ProgressFactory = Callable[[str, int, int], Any]
PoolSource = Literal["file", "retriever"]


class EvalAborted(RuntimeError):
    """A run stopped early because too many items failed in a row; what finished is kept."""


@dataclass
class EvalOptions:
    concurrency: int = 1
    primary: PrimaryMetric = "em"
    max_consecutive_failures: int = 10
    progress: bool = True
    pool_source: PoolSource = "file"


@dataclass
class RunTally:
    label: str
    done_before: int = 0
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


class InvocationClock:
    """Times one invocation's work on a run and logs it (``invocations.jsonl``) when it finished
    something: throughput is read from these, since items overlap at ``--concurrency`` > 1."""

    def __init__(self, label: str, concurrency: int) -> None:
        self.label, self.concurrency = label, max(1, concurrency)
        self.started_at, self.t0 = now_iso(), time.monotonic()

    def log(self, ws: Workspace, tally: RunTally) -> None:
        if tally.ok or tally.failed:
            ws.log_invocation(
                Invocation(
                    run=self.label,
                    started_at=self.started_at,
                    wall_s=round(time.monotonic() - self.t0, 3),
                    ok=tally.ok,
                    failed=tally.failed,
                    concurrency=self.concurrency,
                )
            )


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


def result_record(
    item: Item,
    index: int,
    spec: RunSpec,
    *,
    result: DebateResult | None = None,
    error: str | None = None,
    primary: PrimaryMetric = "em",
    judge: JudgeVerdict | None = None,
    attempt: int = 1,
) -> ResultRecord:
    """The results line for an item: scored when there is a result, failed with a reason otherwise."""
    base: dict[str, Any] = {
        "id": item.id,
        "index": index,
        "run": spec.label,
        "protocol": spec.protocol,
        "prompt_style": spec.prompt_style,
        "question": item.question,
        "gold": item.answers,
        "kind": item.kind,
        "attempt": attempt,
    }
    if result is None:
        return ResultRecord(status="failed", error=error or "unknown error", **base)
    verdict = judge.verdict if judge is not None else None
    scores = score_answer(item, result.answer, primary=primary, judge=verdict)
    seconds = result.wall_ms / 1000 if result.wall_ms else result.usage.seconds
    return ResultRecord(
        status="ok",
        answer=result.answer,
        answer_source=result.answer_source,
        final_answers=result.final_answers,
        consistent=is_consistent(result.final_answers),
        rounds=result.rounds,
        consensus=result.consensus,
        scores=scores,
        judge=judge,
        calls=result.usage.calls,
        prompt_tokens=result.usage.prompt_tokens,
        completion_tokens=result.usage.completion_tokens,
        seconds=round(seconds, 3),
        **base,
    )


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def grade(judge: AnswerJudge | None, item: Item, answer: str | None) -> JudgeVerdict | None:
    """Judge only generative QA: labels, options and role maps have exact scorers."""
    if judge is None or item.kind != "qa":
        return None
    return await judge.grade(item.question, item.answers, answer)


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
        tallies.append(await _run_one(ws, items, spec, models, built, needs_pool(spec), judge, opts, own))
    return tallies


# What a run produces for one item: the debate's result (or None) and the reason it failed, plus
# fields for the results line (same-budget runs record their budget and samples).
Produced = tuple[DebateResult | None, str | None, dict[str, Any]]
Producer = Callable[[Item], Any]  # async (item) -> Produced
SKIP = "skip"  # a producer's error meaning "not yet": the item stays pending, nothing is written


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
            result = await run_debate(item.question, pool, config, models, gold=item.answers, search=search)
            return result, None, {}
        except Exception as exc:  # recorded with its reason and retried on resume
            return None, describe_error(exc), {}

    return await _run_items(ws, items, spec, debate, judge, opts)


async def _run_items(
    ws: Workspace,
    items: Sequence[Item],
    spec: RunSpec,
    produce: Producer,
    judge: AnswerJudge | None,
    opts: EvalOptions,
) -> RunTally:
    """Run ``produce`` over the items without an ok result: score, write, count failures in a row."""
    existing = ws.load_results(spec.label)
    todo = [(i, it) for i, it in enumerate(items) if getattr(existing.get(it.id), "status", None) != "ok"]
    tally = RunTally(spec.label, done_before=len(items) - len(todo))
    bar = make_progress(spec.label, len(items), tally.done_before, opts.progress)
    sem = asyncio.Semaphore(max(1, opts.concurrency))
    streak = 0
    abort = asyncio.Event()
    clock = InvocationClock(spec.label, opts.concurrency)

    async def one(index: int, item: Item) -> None:
        nonlocal streak
        async with sem:
            if abort.is_set():
                return
            prev = existing.get(item.id)
            attempt = (prev.attempt + 1) if prev is not None else 1
            result, error, extra = await produce(item)
            if error == SKIP:
                return
            verdict = await grade(judge, item, result.answer) if result is not None else None
            record = result_record(
                item,
                index,
                spec,
                result=result,
                error=error,
                primary=opts.primary,
                judge=verdict,
                attempt=attempt,
            )
            if extra:
                record = record.model_copy(update=extra)
            ws.write_result(record, result)
            if record.status == "ok":
                tally.ok += 1
                streak = 0
            else:
                tally.failed += 1
                tally.errors.append(f"{item.id}: {record.error}")
                streak += 1
                if streak >= opts.max_consecutive_failures:
                    abort.set()
            bar.update(1)
            bar.set_postfix(failed=tally.failed, refresh=False)

    try:
        await asyncio.gather(*(one(i, it) for i, it in todo))
    finally:
        bar.close()
        ws.compact(spec.label, [it.id for it in items])
        clock.log(ws, tally)
    if abort.is_set():
        raise EvalAborted(
            f"{spec.label}: {streak} items failed in a row (last: {tally.errors[-1]}); stopped. "
            "Finished items are kept; fix the cause and rerun the same command to resume."
        )
    return tally


# ------------------------------------------------------------------------------ same-budget vote
def max_samples() -> int:
    """The most samples ``self_consistency`` accepts (``DebateConfig.samples``' bound)."""
    bound = DebateConfig.model_json_schema()["properties"]["samples"].get("maximum", 20)
    return int(bound)


def budget_label(debate_label: str) -> str:
    return f"vote-budget-{debate_label}"


def vote_config(debate: dict[str, Any]) -> dict[str, Any]:
    """The vote baseline's configuration: self-consistency with the debate's sampling settings
    (temperature, prompt style, token cap, seed); the sample count is set per question."""
    keep = ("temperature", "prompt_style", "max_tokens", "seed")
    return DebateConfig.model_validate(
        {"protocol": "self_consistency", **{k: debate[k] for k in keep if k in debate}}
    ).model_dump(mode="json")


def merge_votes(
    question: str, parts: Sequence[DebateResult], config: dict[str, Any], budget: int
) -> DebateResult:
    """One self-consistency result from a pilot sample and the samples bought with the rest of the
    budget: all transcripts (samples renumbered), usage summed, majority vote over every sample."""
    transcript: list[TranscriptRecord] = []
    for part in parts:
        for rec in part.transcript:
            transcript.append(rec.model_copy(update={"agent": len(transcript)}))
    answers = [r.answer for r in transcript if r.role == "sample"]
    answer, votes = majority_vote(answers)
    usage = Usage()
    by_role: dict[str, Usage] = {}
    for rec in transcript:
        usage.add(rec)
        by_role.setdefault(rec.role, Usage()).add(rec)
    used = usage.prompt_tokens + usage.completion_tokens
    return DebateResult(
        question=question,
        protocol="self_consistency",
        answer=answer,
        answer_source=f"majority of {len(answers)} samples ({votes} votes), {used} of the debate's "
        f"{budget} tokens",
        rounds=1,
        consensus=answers_agree(answers),
        pool=parts[0].pool,
        transcript=transcript,
        usage=usage,
        usage_by_role=by_role,
        final_answers=answers,
        wall_ms=sum(p.wall_ms for p in parts),
        config={**config, "samples": len(answers)},
    )


async def run_same_budget(
    ws: Workspace,
    items: Sequence[Item],
    spec: RunSpec,
    models: RoleModels,
    judge: AnswerJudge | None,
    opts: EvalOptions,
) -> RunTally:
    """Self-consistency given, question by question, the tokens its debate used (Choi et al.'s
    "Debate or Vote" control): one pilot sample measures what a sample costs on this question, then
    as many more as fit in the rest of the debate's prompt + completion tokens are drawn at once
    (capped at ``max_samples``), and the majority of all of them answers. A question whose debate has
    not finished yet is left pending; it runs when the debate has a result."""
    assert spec.budget_of is not None
    debate_results = ws.load_results(spec.budget_of)
    base = DebateConfig.model_validate(spec.config)
    cap = max_samples()

    async def vote(item: Item) -> Produced:
        reference = debate_results.get(item.id)
        if reference is None or reference.status != "ok":
            return None, SKIP, {}
        budget = reference.prompt_tokens + reference.completion_tokens
        pool = empty_pool(item.question)
        try:
            pilot_cfg = base.model_copy(update={"samples": 1})
            pilot = await run_debate(item.question, pool, pilot_cfg, models, gold=item.answers)
            cost = max(1, pilot.usage.prompt_tokens + pilot.usage.completion_tokens)
            total = max(1, min(cap, math.floor(budget / cost)))
            parts = [pilot]
            if total > 1:
                rest_cfg = base.model_copy(update={"samples": total - 1})
                parts.append(await run_debate(item.question, pool, rest_cfg, models, gold=item.answers))
        except Exception as exc:  # recorded with its reason and retried on resume
            return None, describe_error(exc), {}
        merged = merge_votes(item.question, parts, spec.config, budget)
        return merged, None, {"budget_tokens": budget, "samples": len(merged.final_answers)}

    return await _run_items(ws, items, spec, vote, judge, opts)


async def judge_pass(
    ws: Workspace, items: Sequence[Item], labels: Sequence[str], judge: AnswerJudge, primary: PrimaryMetric
) -> int:
    """Grade ok results that have no verdict yet (judge added later, or its call failed); returns how many."""
    by_id = {it.id: it for it in items}
    graded = 0
    for label in labels:
        changed = False
        for rec in ws.load_results(label).values():
            item = by_id.get(rec.id)
            if item is None or rec.status != "ok" or item.kind != "qa":
                continue
            if rec.judge is not None and not rec.judge.call_failed:
                continue
            verdict = await judge.grade(item.question, item.answers, rec.answer)
            scores = score_answer(item, rec.answer, primary=primary, judge=verdict.verdict)
            ws.write_result(rec.model_copy(update={"judge": verdict, "scores": scores}))
            graded += 1
            changed = True
        if changed:
            ws.compact(label, [it.id for it in items])
    return graded

"""What every run of an evaluation shares, in this process or through the API: its options and
tally, an item's scored results line, the LLM judge's grade, and the loop that runs a run's pending
items, writes each result as it finishes and stops after too many failures in a row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.result import DebateResult
from evaluation.items import Item
from evaluation.judge import AnswerJudge, JudgeVerdict
from evaluation.metrics import is_consistent
from evaluation.progress import make_progress
from evaluation.scoring import DEFAULT_PRIMARY, PrimaryMetric, score_answer
from evaluation.store import Invocation, ResultRecord, RunSpec, Workspace, now_iso

PoolSource = Literal["file", "retriever"]


class EvalAborted(RuntimeError):
    """A run stopped early because too many items failed in a row; what finished is kept."""


@dataclass
class EvalOptions:
    concurrency: int = 1
    primary: PrimaryMetric = DEFAULT_PRIMARY
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

    def count(self, record: ResultRecord) -> bool:
        """Count a written results line, keeping a failure's reason; True for a failure, so the
        caller can tell a streak of them (the endpoint is most likely down)."""
        if record.status == "ok":
            self.ok += 1
            return False
        self.failed += 1
        self.errors.append(f"{record.id}: {record.error}")
        return True


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


def result_record(
    item: Item,
    index: int,
    spec: RunSpec,
    *,
    result: DebateResult | None = None,
    error: str | None = None,
    primary: PrimaryMetric = DEFAULT_PRIMARY,
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
        cached_calls=result.usage.from_cache_calls,
        prompt_tokens=result.usage.prompt_tokens,
        completion_tokens=result.usage.completion_tokens,
        seconds=round(seconds, 3),
        degraded=result.degraded,
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


async def scored_record(
    item: Item,
    index: int,
    spec: RunSpec,
    result: DebateResult | None,
    error: str | None,
    *,
    judge: AnswerJudge | None,
    opts: EvalOptions,
    attempt: int,
) -> ResultRecord:
    """An item's results line, graded by the judge where it applies: what a run writes for a debate
    that ran in this process and for one a gateway batch reported alike."""
    verdict = await grade(judge, item, result.answer) if result is not None else None
    return result_record(
        item, index, spec, result=result, error=error, primary=opts.primary, judge=verdict, attempt=attempt
    )


def pending_items(items: Sequence[Item], existing: dict[str, ResultRecord]) -> list[tuple[int, Item]]:
    """The items (with their index) that have no ok result yet: what a resumed run still does."""
    return [(i, it) for i, it in enumerate(items) if getattr(existing.get(it.id), "status", None) != "ok"]


def next_attempt(existing: dict[str, ResultRecord], item_id: str) -> int:
    """The attempt number of an item's next results line (1, or one more than its last)."""
    prev = existing.get(item_id)
    return prev.attempt + 1 if prev is not None else 1


# What a run produces for one item: the debate's result (or None) and the reason it failed, plus
# fields for the results line (same-budget runs record their budget and samples).
Produced = tuple[DebateResult | None, str | None, dict[str, Any]]
Producer = Callable[[Item], Any]  # async (item) -> Produced
SKIP = "skip"  # a producer's error meaning "not yet": the item stays pending, nothing is written


async def run_items(
    ws: Workspace,
    items: Sequence[Item],
    spec: RunSpec,
    produce: Producer,
    judge: AnswerJudge | None,
    opts: EvalOptions,
) -> RunTally:
    """Run ``produce`` over the items without an ok result: score, write, count failures in a row."""
    existing = ws.load_results(spec.label)
    todo = pending_items(items, existing)
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
            attempt = next_attempt(existing, item.id)
            result, error, extra = await produce(item)
            if error == SKIP:
                return
            record = await scored_record(
                item, index, spec, result, error, judge=judge, opts=opts, attempt=attempt
            )
            if extra:
                record = record.model_copy(update=extra)
            ws.write_result(record, result)
            if not tally.count(record):
                streak = 0
            else:
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

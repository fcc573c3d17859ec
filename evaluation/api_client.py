"""``parley eval --api URL``: the same evaluation through the gateway's batch API.

Contract (the gateway's): ``POST /v1/batches {"items": [{"id", "question", "answers"}], "config"}`` →
202 ``{"batch_id", "status", "total"}``; ``GET /v1/batches/{id}`` → ``{"batch_id", "status", "total",
"counts", "progress"}``; ``GET /v1/batches/{id}/results`` → NDJSON ``{"id", "index", "job_id",
"status", "question", "answers", "result": DebateResult | null, "error"}``. Errors are RFC 9457
problem+json. One batch per run; its id is saved in the output folder before polling, so an
interrupted evaluation resumes by polling the same batch instead of submitting the questions again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import ValidationError

from engine.result import DebateResult
from evaluation.items import Item
from evaluation.judge import AnswerJudge
from evaluation.progress import make_progress
from evaluation.run_loop import (
    EvalOptions,
    InvocationClock,
    RunTally,
    next_attempt,
    pending_items,
    scored_record,
)
from evaluation.store import ResultRecord, RunSpec, Workspace, now_iso
from parley_client import AsyncParleyClient, BatchResult, ParleyNotFound, finished_count


def batch_items(items: Sequence[Item]) -> list[dict[str, Any]]:
    """Dataset items as the gateway's batch items."""
    return [{"id": it.id, "question": it.question, "answers": it.answers} for it in items]


async def run_via_api(
    ws: Workspace,
    items: Sequence[Item],
    runs: Sequence[RunSpec],
    client: AsyncParleyClient,
    *,
    judge: AnswerJudge | None = None,
    options: EvalOptions | None = None,
    poll_interval_s: float = 2.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[RunTally]:
    """Submit (or resume) one batch per run, poll it with a progress bar, and record its results."""
    opts = options or EvalOptions()
    tallies = []
    by_id = {it.id: it for it in items}
    index = {it.id: i for i, it in enumerate(items)}
    for spec in runs:
        existing = ws.load_results(spec.label)
        todo = [it for _, it in pending_items(items, existing)]
        tally = RunTally(spec.label, done_before=len(items) - len(todo))
        state = ws.load_batch_state(spec.label)
        if not todo and state is None:
            tallies.append(tally)
            continue
        bar = make_progress(spec.label, len(items), tally.done_before, opts.progress)
        clock = InvocationClock(spec.label, opts.concurrency)
        try:
            # A saved batch (an interrupted invocation) is polled first; then whatever is still to do
            # and was not in it is submitted. Items that fail here are retried by the next invocation.
            attempted: set[str] = set()
            while True:
                if state is not None:
                    try:
                        await client.get_batch(state["batch_id"])
                    except ParleyNotFound:
                        ws.save_batch_state(spec.label, None)
                        state = None
                if state is None:
                    fresh = [it for it in todo if it.id not in attempted]
                    if not fresh:
                        break
                    created = await client.submit_batch(batch_items(fresh), spec.config)
                    state = {
                        "batch_id": created.batch_id,
                        "ids": [it.id for it in fresh],
                        "submitted_at": now_iso(),
                    }
                    ws.save_batch_state(spec.label, state)
                attempted.update(str(i) for i in state.get("ids", []))
                await _poll(client, state["batch_id"], bar, poll_interval_s, sleep)
                for line in await client.results(state["batch_id"]):
                    item = by_id.get(str(line.id))
                    if item is None:
                        continue
                    attempted.add(item.id)
                    record, result = await _record_line(
                        line, item, index[item.id], spec, next_attempt(existing, item.id), judge, opts
                    )
                    ws.write_result(record, result)
                    tally.count(record)
                # Items the batch never reported (the gateway lost them) stay pending for next time.
                ws.save_batch_state(spec.label, None)
                state = None
        finally:
            bar.close()
            ws.compact(spec.label, [it.id for it in items])
            clock.log(ws, tally)
        tallies.append(tally)
    return tallies


async def _poll(
    client: AsyncParleyClient,
    batch_id: str,
    bar: Any,
    poll_interval_s: float,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Poll until the batch is finished, moving the progress bar by the items finished so far."""
    seen = 0
    while True:
        status = await client.get_batch(batch_id)
        done = finished_count(status)
        bar.update(max(0, done - seen))
        seen = max(seen, done)
        if status.status == "completed":
            return
        await sleep(poll_interval_s)


async def _record_line(
    line: BatchResult,
    item: Item,
    index: int,
    spec: RunSpec,
    attempt: int,
    judge: AnswerJudge | None,
    opts: EvalOptions,
) -> tuple[ResultRecord, DebateResult | None]:
    """One NDJSON result line as a scored results record (failed, with the gateway's reason, if no result)."""
    result: DebateResult | None = None
    error = line.error
    if line.result is not None:
        try:
            result = DebateResult.model_validate(line.result)
        except ValidationError as exc:
            error = f"unreadable DebateResult: {exc.error_count()} validation errors"
    if result is None and not error:
        error = f"job {line.status} without a result"
    error = None if result is not None else str(error)
    record = await scored_record(item, index, spec, result, error, judge=judge, opts=opts, attempt=attempt)
    return record, result

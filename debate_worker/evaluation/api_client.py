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
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
from pydantic import ValidationError

from debate_worker.engine.result import DebateResult
from debate_worker.evaluation.datasets import Item
from debate_worker.evaluation.judge import AnswerJudge
from debate_worker.evaluation.runner import EvalOptions, RunTally, grade, make_progress, result_record
from debate_worker.evaluation.store import ResultRecord, RunSpec, Workspace, now_iso

TERMINAL = frozenset(
    {"completed", "complete", "done", "finished", "failed", "cancelled", "canceled", "partial"}
)
FINISHED_COUNTS = ("completed", "succeeded", "done", "failed", "cancelled", "canceled")


class BatchAPIError(RuntimeError):
    """The gateway refused or failed a request; ``detail`` is the problem+json detail when given."""

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message + (f": {detail}" if detail else ""))
        self.status = status
        self.detail = detail


class BatchNotFound(BatchAPIError):
    """The gateway no longer knows a batch (e.g. its store was wiped); the run resubmits."""


class BatchClient:
    """A small async client of the batch API. Pass ``transport`` or ``client`` to control the network."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns = client is None
        self._client = client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )
        if client is not None and api_key:
            self._client.headers.update(headers)

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = await self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise BatchAPIError(f"cannot reach the Parley API ({type(exc).__name__})") from exc
        if resp.status_code >= 400:
            detail: str | None = None
            try:
                body = resp.json()
                detail = str(body.get("detail") or body.get("title") or "") or None
            except (ValueError, AttributeError):
                detail = resp.text[:200] or None
            cls = BatchNotFound if resp.status_code == 404 else BatchAPIError
            raise cls(f"{method} {path} → HTTP {resp.status_code}", status=resp.status_code, detail=detail)
        return resp

    async def submit(self, items: Sequence[Item], config: dict[str, Any]) -> dict[str, Any]:
        """Enqueue ``items`` as one batch debated with ``config``; returns the 202 body."""
        payload = {
            "items": [{"id": it.id, "question": it.question, "answers": it.answers} for it in items],
            "config": config,
        }
        data: dict[str, Any] = (await self._request("POST", "/v1/batches", json=payload)).json()
        return data

    async def status(self, batch_id: str) -> dict[str, Any]:
        data: dict[str, Any] = (await self._request("GET", f"/v1/batches/{batch_id}")).json()
        return data

    async def results(self, batch_id: str) -> list[dict[str, Any]]:
        """The NDJSON result lines; an unreadable line is reported as a failed entry, not dropped."""
        resp = await self._request("GET", f"/v1/batches/{batch_id}/results")
        lines = []
        for n, raw in enumerate(resp.text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                lines.append({"id": None, "error": f"unreadable results line {n}"})
        return lines


def finished_count(status: dict[str, Any]) -> int:
    counts = status.get("counts") or {}
    return sum(int(counts.get(k, 0) or 0) for k in FINISHED_COUNTS)


def is_terminal(status: dict[str, Any]) -> bool:
    total = int(status.get("total") or 0)
    return str(status.get("status", "")).lower() in TERMINAL or (
        total > 0 and finished_count(status) >= total
    )


async def run_via_api(
    ws: Workspace,
    items: Sequence[Item],
    runs: Sequence[RunSpec],
    client: BatchClient,
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
        todo = [it for it in items if getattr(existing.get(it.id), "status", None) != "ok"]
        tally = RunTally(spec.label, done_before=len(items) - len(todo))
        state = ws.load_batch_state(spec.label)
        if not todo and state is None:
            tallies.append(tally)
            continue
        bar = make_progress(spec.label, len(items), tally.done_before, opts.progress)
        try:
            # A saved batch (an interrupted invocation) is polled first; then whatever is still to do
            # and was not in it is submitted. Items that fail here are retried by the next invocation.
            attempted: set[str] = set()
            while True:
                if state is not None:
                    try:
                        await client.status(state["batch_id"])
                    except BatchNotFound:
                        ws.save_batch_state(spec.label, None)
                        state = None
                if state is None:
                    fresh = [it for it in todo if it.id not in attempted]
                    if not fresh:
                        break
                    created = await client.submit(fresh, spec.config)
                    state = {
                        "batch_id": created["batch_id"],
                        "ids": [it.id for it in fresh],
                        "submitted_at": now_iso(),
                    }
                    ws.save_batch_state(spec.label, state)
                attempted.update(str(i) for i in state.get("ids", []))
                await _poll(client, state["batch_id"], bar, poll_interval_s, sleep)
                for line in await client.results(state["batch_id"]):
                    item = by_id.get(str(line.get("id")))
                    if item is None:
                        continue
                    attempted.add(item.id)
                    prev = existing.get(item.id)
                    record, result = await _record_line(
                        line, item, index[item.id], spec, prev.attempt + 1 if prev else 1, judge, opts
                    )
                    ws.write_result(record, result)
                    if record.status == "ok":
                        tally.ok += 1
                    else:
                        tally.failed += 1
                        tally.errors.append(f"{item.id}: {record.error}")
                # Items the batch never reported (the gateway lost them) stay pending for next time.
                ws.save_batch_state(spec.label, None)
                state = None
        finally:
            bar.close()
            ws.compact(spec.label, [it.id for it in items])
        tallies.append(tally)
    return tallies


async def _poll(
    client: BatchClient,
    batch_id: str,
    bar: Any,
    poll_interval_s: float,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Poll until the batch is finished, moving the progress bar by the items finished so far."""
    seen = 0
    while True:
        status = await client.status(batch_id)
        done = finished_count(status)
        bar.update(max(0, done - seen))
        seen = max(seen, done)
        if is_terminal(status):
            return
        await sleep(poll_interval_s)


async def _record_line(
    line: dict[str, Any],
    item: Item,
    index: int,
    spec: RunSpec,
    attempt: int,
    judge: AnswerJudge | None,
    opts: EvalOptions,
) -> tuple[ResultRecord, DebateResult | None]:
    """One NDJSON result line as a scored results record (failed, with the gateway's reason, if no result)."""
    result: DebateResult | None = None
    error = line.get("error")
    if line.get("result") is not None:
        try:
            result = DebateResult.model_validate(line["result"])
        except ValidationError as exc:
            error = f"unreadable DebateResult: {exc.error_count()} validation errors"
    if result is None and not error:
        error = f"job {line.get('status', 'unknown')} without a result"
    verdict = await grade(judge, item, result.answer) if result is not None else None
    record = result_record(
        item,
        index,
        spec,
        result=result,
        error=None if result is not None else str(error),
        primary=opts.primary,
        judge=verdict,
        attempt=attempt,
    )
    return record, result

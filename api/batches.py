"""Reading, cancelling and deleting a batch (the service layer under ``/v1/batches/{id}``).

Results stream as JSONL in input order straight from the job store, a chunk of jobs at a time, so a
10,000-item batch never sits in memory as one document. Errors are typed (``api.errors``); this
module reads no request and builds no response.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from api.deps import ApiState
from api.errors import NotFound
from api.problems import STORE_UNAVAILABLE
from api.schemas import BatchDeleted, BatchView
from services.jobstore import ACTIVE, TERMINAL, BatchRecord, JobStore

log = logging.getLogger(__name__)


async def owned_batch(state: ApiState, owner: str, batch_id: str) -> BatchRecord:
    """The batch, if it exists and belongs to ``owner``; another key's batch is a 404 like a missing one."""
    batch = await state.store.get_batch(batch_id)
    if batch is None or batch.owner != owner:
        raise NotFound(f"no batch {batch_id!r}")
    return batch


def batch_status(counts: dict[str, int], total: int) -> str:
    finished = sum(counts[s] for s in TERMINAL)
    if finished >= total:
        return "completed"
    if counts["queued"] == total:
        return "queued"
    return "running"


async def batch_view(state: ApiState, owner: str, batch_id: str) -> BatchView:
    """Counts per status and the share of items finished."""
    batch = await owned_batch(state, owner, batch_id)
    counts = await state.store.batch_counts(batch_id)
    finished = sum(counts[s] for s in TERMINAL)
    return BatchView(
        batch_id=batch_id,
        status=batch_status(counts, batch.total),
        total=batch.total,
        counts=counts,
        progress=round(finished / batch.total, 4) if batch.total else 1.0,
        created_at=batch.created_at,
        config=batch.config,
    )


async def result_lines(store: JobStore, batch_id: str) -> AsyncIterator[bytes]:
    """One JSON line per item in input order; the stored result JSON goes out as is (see ``JobFull``):
    no parse, no re-serialisation."""
    index = 0
    async for job_id, found in store.iter_batch_jobs(batch_id, with_result=True):
        result_json = None
        if found is None:
            row: dict[str, Any] = {
                "id": None,
                "index": index,
                "job_id": job_id,
                "status": "failed",
                "question": None,
                "answers": None,
                "error": "job record expired",
            }
        else:
            job = found.job
            result_json = found.result_json
            row = {
                "id": job.item_id,
                "index": job.index if job.index is not None else index,
                "job_id": job_id,
                "status": job.status,
                "question": job.question,
                "answers": job.answers,
                "error": job.error,
            }
        index += 1
        head = json.dumps(row, ensure_ascii=False)
        yield f'{head[:-1]}, "result": {result_json or "null"}}}\n'.encode()


async def owned_results(state: ApiState, owner: str, batch_id: str) -> AsyncIterator[bytes]:
    """The result lines of ``owner``'s batch; ``NotFound`` (raised here, before any line) otherwise."""
    await owned_batch(state, owner, batch_id)
    return until_store_fails(result_lines(state.store, batch_id), batch_id, state.settings.retry_after_s)


async def until_store_fails(
    lines: AsyncIterator[bytes], batch_id: str, retry_after_s: int
) -> AsyncIterator[bytes]:
    """The lines, and should the job store become unreachable mid-stream, one last line that says so
    (``{"error": ..., "retry_after_s": N}``: the lines so far are valid, fetch again for the rest)
    instead of a response broken off."""
    try:
        async for line in lines:
            yield line
    except STORE_UNAVAILABLE as exc:
        log.warning("batch results ended: the job store is unavailable: %s: %s", type(exc).__name__, exc)
        message = f"the job store became unavailable mid-stream; fetch the results of {batch_id} again"
        yield (json.dumps({"error": message, "retry_after_s": retry_after_s}) + "\n").encode()


async def cancel_owned_batch(state: ApiState, owner: str, batch_id: str) -> BatchView:
    """Cancel every unfinished item of ``owner``'s batch and return the batch as it stands; finished
    items keep their results, and the batch stays readable."""
    await owned_batch(state, owner, batch_id)
    await cancel_unfinished(state, batch_id)
    return await batch_view(state, owner, batch_id)


async def cancel_unfinished(state: ApiState, batch_id: str, reason: str = "batch cancelled") -> None:
    """Cancel every unfinished item of the batch; finished items keep their results."""
    async for job_id, found in state.store.iter_batch_jobs(batch_id):
        if found is not None and found.job.status in ACTIVE:
            await state.store.transition(
                job_id, "cancelled", ACTIVE, event="job.cancelled", data={"reason": reason}
            )


async def delete_owned_batch(state: ApiState, owner: str, batch_id: str) -> BatchDeleted:
    """Delete ``owner``'s batch for good: its unfinished items cancelled (their workers stop), then the
    batch and every item removed, so later reads of either are 404. The tokens its items used stay
    charged to the key. ``NotFound`` for a missing batch or another key's."""
    await owned_batch(state, owner, batch_id)
    await cancel_unfinished(state, batch_id, "batch deleted by the client")
    if not await state.store.remove_batch(batch_id):
        # Deleted by a request that ran alongside this one (cancelled items never become unfinished
        # again, so an item left unfinished is not why).
        raise NotFound(f"no batch {batch_id!r}")
    # A replay of the request that created it would point at nothing: it is forgotten too.
    await state.idempotency.forget(owner, f"/v1/batches/{batch_id}")
    return BatchDeleted(id=batch_id)

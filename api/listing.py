"""The caller's recent debates and batches, newest first (the service under ``GET /v1/debates`` and
``GET /v1/batches``).

Both read the per-owner listing indexes of the job store, so a key only ever lists its own work.
Pages are cursor-based: ``before`` is the last id of the previous page (``next_before``), which stays
correct while new jobs arrive at the top; an offset would shift under them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.batches import batch_status
from api.deps import ApiState
from services.jobstore import TERMINAL, JobRecord, JobStatus


class DebateSummary(BaseModel):
    """One line of the job list: enough to find a debate, not its result."""

    job_id: str
    status: JobStatus
    question: str
    protocol: str = Field(description="the config's protocol")
    created_at: float
    finished_at: float | None = None
    batch_id: str | None = None
    item_id: str | None = None
    error: str | None = None


# A summary shows each of these as the job's record stores it, under the same name; only the protocol
# is read out of the config.
_SUMMARY_FROM_RECORD = DebateSummary.model_fields.keys() & JobRecord.model_fields.keys()


class DebateList(BaseModel):
    items: list[DebateSummary]
    next_before: str | None = Field(description="pass as `before` for the next page; null on the last")


class BatchSummary(BaseModel):
    batch_id: str
    status: str = Field(description="queued, running, completed (every item finished)")
    protocol: str
    total: int
    counts: dict[str, int]
    progress: float = Field(ge=0, le=1, description="share of items finished")
    created_at: float


class BatchList(BaseModel):
    items: list[BatchSummary]
    next_before: str | None = Field(description="pass as `before` for the next page; null on the last")


def _protocol(config: dict[str, Any]) -> str:
    return str(config.get("protocol") or "madke")


async def recent_debates(state: ApiState, owner: str, limit: int, before: str | None) -> DebateList:
    """The owner's recent debates (single and batch items), newest first, a page of ``limit``."""
    jobs = await state.store.list_jobs(owner, limit, before)
    items = [
        DebateSummary(**j.model_dump(include=_SUMMARY_FROM_RECORD), protocol=_protocol(j.config))
        for j in jobs
    ]
    return DebateList(items=items, next_before=items[-1].job_id if len(items) == limit else None)


async def recent_batches(state: ApiState, owner: str, limit: int, before: str | None) -> BatchList:
    """The owner's recent batches with their counts per status, newest first, a page of ``limit``."""
    items: list[BatchSummary] = []
    for batch in await state.store.list_batches(owner, limit, before):
        counts = await state.store.batch_counts(batch.batch_id)
        finished = sum(counts[s] for s in TERMINAL)
        items.append(
            BatchSummary(
                batch_id=batch.batch_id,
                status=batch_status(counts, batch.total),
                protocol=_protocol(batch.config),
                total=batch.total,
                counts=counts,
                progress=round(finished / batch.total, 4) if batch.total else 1.0,
                created_at=batch.created_at,
            )
        )
    return BatchList(items=items, next_before=items[-1].batch_id if len(items) == limit else None)

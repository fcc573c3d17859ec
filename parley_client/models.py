"""The documents the client returns: the gateway's own models, and the two it streams."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.schemas import Accepted, BatchAccepted, BatchView, JobView, UsageView
from engine.result import DebateResult
from services.jobstore import TERMINAL

__all__ = [
    "Accepted",
    "BatchAccepted",
    "BatchResult",
    "BatchView",
    "DebateEvent",
    "JobView",
    "UsageView",
    "finished_count",
]


class DebateEvent(BaseModel):
    """One Server-Sent Event of a job: ``job.queued``, ``pool.ready``, ``turn.completed``, …"""

    id: str
    type: str
    data: dict[str, Any] = Field(default_factory=dict)


class BatchResult(BaseModel):
    """One line of ``GET /v1/batches/{id}/results``, in input order. ``result`` is the engine's
    ``DebateResult`` as JSON (``debate_result()`` validates it); unfinished items have none."""

    id: str | None = None
    index: int | None = None
    job_id: str | None = None
    status: str
    question: str | None = None
    answers: list[str] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    def debate_result(self) -> DebateResult | None:
        return DebateResult.model_validate(self.result) if self.result is not None else None

    @property
    def answer(self) -> str | None:
        return (self.result or {}).get("answer")


def finished_count(status: BatchView) -> int:
    """Items of a batch that reached a terminal job status."""
    return sum(int(status.counts.get(k, 0) or 0) for k in TERMINAL)

"""The gateway's answers and the job status names: one module the gateway, the job store and the
Python client share (``api.schemas`` adds the request bodies, which need the engine's config)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JobStatus = Literal["queued", "retrieving", "debating", "completed", "failed", "cancelled"]
STATUSES: tuple[JobStatus, ...] = ("queued", "retrieving", "debating", "completed", "failed", "cancelled")
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
ACTIVE: tuple[JobStatus, ...] = ("queued", "retrieving", "debating")
TERMINAL_EVENTS = frozenset({"job.completed", "job.failed", "job.cancelled"})


class Usage(BaseModel):
    """One owner's token use on one UTC day: charged as each LLM call ends, reserved while jobs run."""

    day: str
    tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    reserved: int = 0
    jobs_completed: int = 0
    jobs_failed: int = 0
    jobs_cancelled: int = 0


class Accepted(BaseModel):
    job_id: str
    status: JobStatus
    location: str


class BatchAccepted(BaseModel):
    batch_id: str
    status: str
    total: int
    location: str


class Progress(BaseModel):
    round: int = Field(description="last completed round")
    rounds: int = Field(description="maximum rounds of this configuration")


class JobView(BaseModel):
    """``GET /v1/debates/{id}``; ``result`` is the engine's DebateResult (with its transcript)."""

    job_id: str
    status: JobStatus
    question: str
    config: dict[str, Any]
    progress: Progress
    attempts: int
    created_at: float
    updated_at: float
    started_at: float | None = None
    finished_at: float | None = None
    batch_id: str | None = None
    item_id: str | None = None
    error: str | None = None
    result: dict[str, Any] | None = None


class BatchView(BaseModel):
    batch_id: str
    status: str = Field(description="queued, running, completed (every item finished)")
    total: int
    counts: dict[str, int]
    progress: float = Field(ge=0, le=1, description="share of items finished")
    created_at: float
    config: dict[str, Any]


class DebateDeleted(BaseModel):
    """``DELETE /v1/debates/{id}``: the debate is gone (a later ``GET`` is 404)."""

    id: str = Field(description="the deleted debate's job id")
    object: Literal["debate.deleted"] = "debate.deleted"
    deleted: Literal[True] = True


class BatchDeleted(BaseModel):
    """``DELETE /v1/batches/{id}``: the batch and its items are gone (a later ``GET`` is 404)."""

    id: str = Field(description="the deleted batch's id")
    object: Literal["batch.deleted"] = "batch.deleted"
    deleted: Literal[True] = True


class Limits(BaseModel):
    rate_limit_per_minute: int
    max_active_jobs: int
    active_jobs: int
    daily_token_quota: int | None = Field(description="tokens per UTC day; null = no quota")
    budget_calls_default: int
    budget_calls_max: int
    budget_tokens_default: int
    budget_tokens_max: int
    storage_bytes: int | None = Field(
        default=None,
        description="bytes of the job store this key may fill (jobs, results, events, batches, "
        "idempotency records); null = no per-key cap",
    )


class UsageView(BaseModel):
    """Tokens are charged as each LLM call ends (cancelled, failed and resumed work included), to the
    UTC day the job was submitted; each unfinished job holds a reservation of its token budget, which
    its calls draw from and which is given back when it ends. A job never uses more than its budget,
    so a quota can never be overrun by jobs in flight."""

    owner: str
    today: Usage
    remaining_today: int | None = Field(description="quota - used - reserved; null = no quota")
    days: list[Usage] = Field(description="the last days, newest first (today included)")
    stored_bytes: int = Field(
        default=0,
        description="what this key keeps in the job store, counted from above (its writes of the "
        "last job_ttl_s plus a day)",
    )
    limits: Limits


class DebateEvent(BaseModel):
    """One Server-Sent Event of a job: ``job.queued``, ``pool.ready``, ``turn.completed``, …"""

    id: str
    type: str
    data: dict[str, Any] = Field(default_factory=dict)


class ResultUsage(BaseModel):
    """Calls, tokens and seconds of a debate (or of one role in it)."""

    model_config = ConfigDict(extra="allow")

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0


class DebateResult(BaseModel):
    """A finished debate as the gateway sends it (the engine's ``DebateResult`` as JSON): the answer,
    how it was reached, usage; the pool and the transcript as their JSON objects. Fields the engine
    adds later are kept (``extra="allow"``), so an older client reads a newer gateway's results."""

    model_config = ConfigDict(extra="allow")

    question: str
    protocol: str
    answer: str | None
    answer_source: str = ""
    rounds: int
    consensus: bool
    pool: dict[str, Any] = Field(default_factory=dict)
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    usage: ResultUsage = Field(default_factory=ResultUsage)
    usage_by_role: dict[str, ResultUsage] = Field(default_factory=dict)
    final_answers: list[str | None] = Field(default_factory=list)
    wall_ms: float = 0.0
    config: dict[str, Any] = Field(default_factory=dict)


class BatchResult(BaseModel):
    """One line of ``GET /v1/batches/{id}/results``, in input order. ``result`` is the engine's
    ``DebateResult`` as JSON (``debate_result()`` reads it); unfinished items have none."""

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

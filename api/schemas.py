"""Request and response bodies of the public API (the contracts other components code against)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.config import MAX_QUESTION_CHARS, DebateConfig, validate_question
from services.jobstore import JobStatus, Usage
from services.knowledge import KnowledgeSource

MAX_POOL_ITEMS = 50
# Every stored string is bounded: a gold answer is a short phrase.
Answer = Annotated[str, Field(max_length=500)]


class PoolItem(BaseModel):
    """A knowledge item brought with the question (e.g. a benchmark's precomputed pool), used instead
    of retrieval. It is quoted into prompts as data, like every pool item (docs/security.md)."""

    model_config = ConfigDict(extra="forbid")

    source: KnowledgeSource
    title: str = Field(default="", max_length=300)
    text: str = Field(default="", max_length=4000, description="an item without text is dropped")
    url: str | None = Field(default=None, max_length=2000)
    score: float = Field(default=0.0, allow_inf_nan=False)


class DebateRequest(BaseModel):
    """``POST /v1/debates``: one question and how to debate it."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    config: DebateConfig = Field(default_factory=DebateConfig)
    answers: list[Answer] | None = Field(
        default=None, max_length=50, description="gold answers, only for evaluation-only settings"
    )
    pool: list[PoolItem] | None = Field(
        default=None,
        max_length=MAX_POOL_ITEMS,
        description="the knowledge pool to debate over instead of retrieving one (first k_wiki "
        "Wikipedia and k_web web items are used)",
    )

    @field_validator("question")
    @classmethod
    def _question(cls, v: str) -> str:
        return validate_question(v)

    @model_validator(mode="after")
    def _gold_for_oracle_settings(self) -> DebateRequest:
        # truth_last orders views by the gold answer, so it is refused without one.
        if self.config.requires_gold and not self.answers:
            raise ValueError("config.ordering: 'truth_last' needs 'answers' (gold answers; evaluation only)")
        return self


class BatchItem(BaseModel):
    """One line of a batch: ``{id?, question, answers?}``."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, max_length=200)
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    answers: list[Answer] | None = Field(default=None, max_length=50)
    pool: list[PoolItem] | None = Field(default=None, max_length=MAX_POOL_ITEMS)

    @field_validator("question")
    @classmethod
    def _question(cls, v: str) -> str:
        return validate_question(v)


class BatchRequest(BaseModel):
    """``POST /v1/batches`` as JSON: the items and one config for all of them."""

    model_config = ConfigDict(extra="forbid")

    items: list[BatchItem]
    config: DebateConfig = Field(default_factory=DebateConfig)

    @model_validator(mode="after")
    def _gold_for_oracle_settings(self) -> BatchRequest:
        # truth_last orders views by the gold answer, so every item must carry one.
        if self.config.requires_gold:
            missing = [i for i, item in enumerate(self.items) if not item.answers]
            if missing:
                raise ValueError(
                    f"config.ordering: 'truth_last' needs 'answers' on every item (missing at {missing[:10]})"
                )
        return self


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

"""Request and response bodies of the public API (the contracts other components code against).

The request bodies are here (they validate the engine's ``DebateConfig``); the answers live in
``parley_wire.models``, shared with the job store and the Python client."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.config import MAX_QUESTION_CHARS, DebateConfig, validate_question
from parley_wire.models import (
    Accepted,
    BatchAccepted,
    BatchDeleted,
    BatchView,
    DebateDeleted,
    JobView,
    Limits,
    Progress,
    UsageView,
)
from services.knowledge import KnowledgeSource

# The answers (job, batch, deletion and usage views) are the wire models the Python client reads too.
__all__ = [
    "Accepted",
    "BatchAccepted",
    "BatchDeleted",
    "BatchItem",
    "BatchRequest",
    "BatchView",
    "DebateDeleted",
    "DebateRequest",
    "JobView",
    "Limits",
    "PoolItem",
    "Progress",
    "UsageView",
]

MAX_POOL_ITEMS = 50


def as_json_types(value: Any) -> Any:
    """A parsed JSON value with every integral float as an int (``3.0`` is the integer 3 in JSON
    Schema), for strict validation: strict, ``false`` is no number and ``"2"`` no integer, as the
    schema says, while ``3.0`` stays a valid integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [as_json_types(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json_types(v) for k, v in value.items()}
    return value


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

    id: str | None = Field(
        default=None,
        max_length=200,
        description="the item's name in the results (default: its index); unique within the batch",
    )
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

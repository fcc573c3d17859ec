"""What a debate produces: one transcript record per LLM call, usage totals and the final answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from services.knowledge import KnowledgeItem, KnowledgePool


class TranscriptRecord(BaseModel):
    """One LLM call. ``answer`` is what Parley parsed; ``parse_error`` says why a fallback was used."""

    round: int = Field(description="1-based round; 0 for calls outside the rounds (summary, votes)")
    role: str = Field(description="select, debater, judge, summarizer, vote, moderator, …")
    agent: int | None = Field(default=None, description="0-based agent index; None for judge/summarizer")
    model: str = ""
    selected: list[int] | None = Field(default=None, description="pool numbers chosen (role=select)")
    ignored_selection: list[int] = Field(default_factory=list, description="numbers not in the pool")
    no_found: bool | None = None
    knowledge: list[int] = Field(default_factory=list, description="pool numbers shown in this call")
    text: str = ""
    answer: str | None = None
    verdict: bool | None = Field(default=None, description="judge: consensus reached?")
    parse_error: str | None = None
    output_mode: Literal["schema", "text"] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    latency_ms: float = 0.0
    messages: list[dict[str, str]] | None = Field(
        default=None, description="the prompt messages sent ({role, content}); for inspecting a call"
    )
    extra: dict[str, Any] = Field(default_factory=dict)
    from_cache: bool = Field(
        default=False, description="replayed from the call cache: no model call, no charge"
    )
    degraded: str | None = Field(
        default=None,
        description="why this step's outcome is not what its endpoint would have given: a fallback "
        "endpoint answered, or its reply was unreadable and a default was used",
    )


class Usage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0
    from_cache_calls: int = Field(default=0, description="calls replayed from the call cache (among calls)")

    def add(self, record: TranscriptRecord) -> None:
        self.calls += 1
        self.from_cache_calls += record.from_cache
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.cached_tokens += record.cached_tokens or 0
        self.seconds += record.latency_ms / 1000


class DebateResult(BaseModel):
    question: str
    protocol: str
    answer: str | None
    answer_source: str = Field(description="how the final answer was reached, e.g. summarizer, majority")
    rounds: int
    consensus: bool
    pool: KnowledgePool
    transcript: list[TranscriptRecord]
    usage: Usage
    usage_by_role: dict[str, Usage]
    final_answers: list[str | None] = Field(
        default_factory=list, description="each agent's parsed answer in the last round (for Co2/Cons)"
    )
    wall_ms: float = 0.0
    config: dict[str, Any] = Field(default_factory=dict)

    @property
    def degraded(self) -> list[str]:
        """Each degraded step of the debate (``TranscriptRecord.degraded``), as one line."""
        return [f"round {r.round} {r.role}: {r.degraded}" for r in self.transcript if r.degraded is not None]


class Checkpoint(BaseModel):
    """The state after a completed round, so a redelivered job resumes instead of starting over."""

    round: int
    transcript: list[TranscriptRecord]
    state: dict[str, Any] = Field(default_factory=dict)
    pool_added: list[KnowledgeItem] = Field(
        default_factory=list, description="items the debaters' searches added to the pool so far"
    )

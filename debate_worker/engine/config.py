"""``DebateConfig``: the protocol and its parameters, validated once at the edge (API, CLI, batch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_AGENTS = 8
MAX_ROUNDS = 10
MAX_QUESTION_CHARS = 2000

KnowledgeMode = Literal["all", "wikipedia", "web", "none"]
PromptStyle = Literal["paper", "robust"]
JudgeMode = Literal["llm", "rule", "both"]

# Protocols that use a single agent; the others need at least two.
SINGLE_AGENT_PROTOCOLS = frozenset({"single", "cot", "self_consistency", "rag"})


class DebateConfig(BaseModel):
    """Everything that decides how a question is debated. Defaults are the MADKE paper's (§4.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Literal["madke", "single", "cot", "self_consistency", "rag"] = "madke"
    agents: int = Field(default=2, ge=1, le=MAX_AGENTS)
    rounds: int = Field(default=3, ge=1, le=MAX_ROUNDS, description="maximum debate rounds")
    temperature: float = Field(default=0.5, ge=0.0, le=2.0)
    knowledge: KnowledgeMode = "all"
    selection: bool = Field(default=True, description="adaptive knowledge selection (Prompt 3.1)")
    max_selected: int = Field(default=3, ge=1, le=10)
    sequential: bool = Field(default=False, description="one call at a time in speaking order")
    k_wiki: int = Field(default=5, ge=0, le=50)
    k_web: int = Field(default=5, ge=0, le=50)
    samples: int = Field(default=5, ge=1, le=20, description="self_consistency: reasoning paths sampled")
    prompt_style: PromptStyle = "paper"
    judge: JudgeMode = "llm"
    max_tokens: int | None = Field(
        default=None, ge=16, le=8192, description="per call; None = client default"
    )
    seed: int | None = None

    @model_validator(mode="after")
    def _check_agents(self) -> DebateConfig:
        if self.protocol not in SINGLE_AGENT_PROTOCOLS and self.agents < 2:
            raise ValueError(f"protocol {self.protocol!r} needs at least 2 agents")
        return self

    @property
    def uses_knowledge(self) -> bool:
        return self.knowledge != "none" and (self.k_wiki + self.k_web) > 0

    def knowledge_sources(self) -> set[str]:
        return {"all": {"wikipedia", "web"}, "wikipedia": {"wikipedia"}, "web": {"web"}, "none": set()}[
            self.knowledge
        ]


def validate_question(question: str) -> str:
    """Strip and bound a question; raises ``ValueError`` with a message fit for users."""
    q = question.strip()
    if not q:
        raise ValueError("question is empty")
    if len(q) > MAX_QUESTION_CHARS:
        raise ValueError(f"question is {len(q)} characters; the limit is {MAX_QUESTION_CHARS}")
    return q

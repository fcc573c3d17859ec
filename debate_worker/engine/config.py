"""``DebateConfig``: the protocol and its parameters, validated once at the edge (API, CLI, batch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_AGENTS = 8
MAX_ROUNDS = 10
MAX_QUESTION_CHARS = 2000

KnowledgeMode = Literal["all", "wikipedia", "web", "none"]
PromptStyle = Literal["paper", "robust"]
JudgeMode = Literal["llm", "rule", "both", "auto"]

# Protocols that use a single agent; the others need at least two.
SINGLE_AGENT_PROTOCOLS = frozenset({"single", "cot", "self_consistency", "rag"})

ProtocolName = Literal["madke", "single", "cot", "self_consistency", "rag", "society", "mad", "mallm", "kks"]
# Issue 5: the order in which an agent is shown the other agents' answers (Zhang et al.).
Ordering = Literal["fixed", "random", "madc", "truth_last"]
SpeakingOrder = Literal["fixed", "random", "reverse"]
MallmDecision = Literal[
    "majority", "supermajority", "unanimity", "simple", "ranked", "cumulative", "approval"
]
CONSENSUS_DECISIONS = frozenset({"majority", "supermajority", "unanimity"})
VOTING_DECISIONS = frozenset({"simple", "ranked", "cumulative", "approval"})


class AgentSpec(BaseModel):
    """One member of a heterogeneous team (Wu et al.): its own model, endpoint and temperature.

    There is deliberately no API key here: a config travels through the API, job store and results,
    so an agent on another endpoint uses the global key (``PARLEY_LLM_API_KEY``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(default=None, max_length=200, description="model name; None = the role's")
    base_url: str | None = Field(default=None, max_length=500, description="OpenAI-compatible URL")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    persona: str | None = Field(default=None, max_length=300, description="optional role description")

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v


class MadSettings(BaseModel):
    """Liang et al. (MAD): tit-for-tat level (paper Table 11), adaptive break, side swap."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tit_for_tat: int = Field(default=2, ge=0, le=3, description="0 full consensus … 3 disagree always")
    adaptive_break: bool = Field(default=True, description="stop once the moderator has a preference")
    swap_sides: bool = Field(default=False, description="agent 1 argues affirmative, agent 0 negative")


class MallmSettings(BaseModel):
    """Kaesberg et al. (MALLM) decision protocols. Ambiguities of the paper are settings (docs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: MallmDecision = "majority"
    paradigm: Literal["memory", "drafting", "collective_improvement"] = Field(
        default="memory",
        description="memory: turn order, all messages visible; drafting: All-Agents Drafting (first "
        "turn independent); collective_improvement: no turn order, only last turn's solutions",
    )
    vote_after: int = Field(default=3, ge=1, le=10, description="voting starts after this many turns")
    memory_turns: int = Field(default=2, ge=1, le=10, description="turns of history an agent sees")
    threshold_rule: Literal[">=", ">"] = Field(
        default=">=", description="agreement share must be >= or > the threshold"
    )
    majority_threshold: float = Field(default=0.5, gt=0.0, le=1.0)
    supermajority_threshold: float = Field(default=0.66, gt=0.0, le=1.0)
    cumulative_points: int = Field(default=10, ge=1, le=100, description="paper prompt 10, text 25")
    ranking_base: Literal[0, 1] = Field(default=1, description="solution numbers start at 0 or 1")
    fallback: Literal["first_agent", "plurality"] = Field(
        default="first_agent",
        description="no decision by the turn limit: first agent's solution (paper) or most common answer",
    )

    @model_validator(mode="after")
    def _check(self) -> MallmSettings:
        if self.paradigm == "collective_improvement" and self.decision in CONSENSUS_DECISIONS:
            raise ValueError(
                f"paradigm: collective_improvement works only with a voting decision "
                f"({', '.join(sorted(VOTING_DECISIONS))}), not {self.decision!r}"
            )
        return self

    def threshold(self) -> float:
        return {"majority": self.majority_threshold, "supermajority": self.supermajority_threshold}.get(
            self.decision, 1.0
        )


class DebateConfig(BaseModel):
    """Everything that decides how a question is debated. Defaults are the MADKE paper's (§4.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: ProtocolName = "madke"
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
    judge: JudgeMode = Field(
        default="auto",
        description="llm: the LLM judge alone (the paper); rule: compare normalised answers; both: stop "
        "only when both agree; auto: both with the robust style, llm with the paper style",
    )
    max_tokens: int | None = Field(
        default=None, ge=16, le=8192, description="per call; None = client default"
    )
    seed: int | None = None
    # Issue 5: protocols of the literature and the factors they vary.
    ordering: Ordering = Field(
        default="fixed",
        description="order of the other agents' answers shown to an agent (society, mallm, kks); "
        "truth_last needs the gold answer and is for evaluation only",
    )
    team: list[AgentSpec] | None = Field(
        default=None, max_length=MAX_AGENTS, description="per-agent model/endpoint/temperature"
    )
    confidence: bool = Field(default=False, description="agents state confidence 1-10 and see others'")
    speaking_order: SpeakingOrder = Field(default="fixed", description="who speaks first in a turn")
    depth: int = Field(default=1, ge=1, le=3, description="kks: full player-by-player passes")
    reasks: int = Field(default=1, ge=0, le=3, description="re-asks for an unreadable vote/verdict")
    mad: MadSettings = Field(default_factory=MadSettings)
    mallm: MallmSettings = Field(default_factory=MallmSettings)

    @model_validator(mode="after")
    def _check_agents(self) -> DebateConfig:
        if self.protocol not in SINGLE_AGENT_PROTOCOLS and self.agents < 2:
            raise ValueError(f"protocol {self.protocol!r} needs at least 2 agents")
        if self.protocol == "mad" and self.agents != 2:
            raise ValueError("agents: protocol 'mad' has exactly 2 debaters (affirmative, negative)")
        if (
            self.protocol == "mallm"
            and self.mallm.decision in VOTING_DECISIONS
            and self.mallm.vote_after > self.rounds
        ):
            raise ValueError(
                f"rounds: {self.rounds} turns end before voting starts (mallm.vote_after="
                f"{self.mallm.vote_after}); the turn limit is `rounds` (the paper uses 5)"
            )
        if self.team is not None and len(self.team) != self.agents:
            raise ValueError(f"team: {len(self.team)} agent specs for {self.agents} agents")
        return self

    @property
    def requires_gold(self) -> bool:
        """True when the run needs the reference answer (evaluation only; the API must refuse it)."""
        return self.ordering == "truth_last"

    def agent_temperature(self, agent: int) -> float:
        """The agent's own temperature in a heterogeneous team, else the debate's."""
        if self.team is not None and 0 <= agent < len(self.team):
            t = self.team[agent].temperature
            if t is not None:
                return t
        return self.temperature

    @property
    def judge_mode(self) -> str:
        """``judge`` with ``auto`` resolved by prompt style (what measured better, reports/styles-*)."""
        if self.judge == "auto":
            return "both" if self.prompt_style == "robust" else "llm"
        return self.judge

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

"""``mallm``'s own settings (``DebateConfig.mallm``) and the rule between them, kept with the protocol."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.protocols.mallm.decisions import CONSENSUS_RULES, VOTING_RULES

MallmDecision = Literal[
    "majority", "supermajority", "unanimity", "simple", "ranked", "cumulative", "approval"
]
# Each decision is a rule object: consensus (decisions.CONSENSUS_RULES) or voting (decisions.VOTING_RULES).
CONSENSUS_DECISIONS = frozenset(CONSENSUS_RULES)
VOTING_DECISIONS = frozenset(VOTING_RULES)


class MallmSettings(BaseModel):
    """Kaesberg et al. (MALLM) decision protocols. Ambiguities of the paper are settings (docs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: MallmDecision = "majority"
    paradigm: Literal["memory", "drafting", "collective_improvement"] = Field(
        default="memory",
        description="memory: turn order, all messages visible; drafting: All-Agents Drafting (first "
        "turn independent); collective_improvement: no turn order, only last turn's solutions",
    )
    vote_after: int = Field(
        default=3,
        ge=1,
        le=10,
        description="voting decisions: the vote is held after this many turns (paper: 3); above `rounds`, "
        "after the last turn",
    )
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
        """The agreement share a consensus decision needs (1.0 for a voting decision: never by agreement)."""
        rule = CONSENSUS_RULES.get(self.decision)
        return rule.threshold_of(self) if rule is not None else 1.0

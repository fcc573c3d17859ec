"""``mallm``: Kaesberg et al. (2025) decision protocols on one discussion engine."""

from __future__ import annotations

from engine.protocols.mallm import paper, robust
from engine.protocols.mallm.prompts import MallmPrompts
from engine.protocols.mallm.settings import (
    CONSENSUS_DECISIONS,
    VOTING_DECISIONS,
    MallmDecision,
    MallmSettings,
)
from engine.styles import ByStyle

prompts_for: ByStyle[MallmPrompts] = ByStyle(paper=paper, robust=robust)

__all__ = ["CONSENSUS_DECISIONS", "VOTING_DECISIONS", "MallmDecision", "MallmSettings", "prompts_for"]

"""``mallm``: Kaesberg et al. (2025) decision protocols on one discussion engine."""

from __future__ import annotations

from engine.protocols.mallm.paper import PAPER
from engine.protocols.mallm.prompts import MallmPrompts
from engine.protocols.mallm.robust import ROBUST
from engine.protocols.mallm.settings import (
    CONSENSUS_DECISIONS,
    VOTING_DECISIONS,
    MallmDecision,
    MallmSettings,
)
from engine.styles import ByStyle

prompts_for: ByStyle[MallmPrompts] = ByStyle(paper=PAPER, robust=ROBUST)

__all__ = ["CONSENSUS_DECISIONS", "VOTING_DECISIONS", "MallmDecision", "MallmSettings", "prompts_for"]

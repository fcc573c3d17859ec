"""``mad``: Liang et al. (2024), Multi-Agent Debate with divergent thinking."""

from __future__ import annotations

from engine.protocols.mad.paper import PAPER
from engine.protocols.mad.prompts import MadPrompts
from engine.protocols.mad.robust import ROBUST
from engine.protocols.mad.settings import MadSettings
from engine.styles import ByStyle

prompts_for: ByStyle[MadPrompts] = ByStyle(paper=PAPER, robust=ROBUST)

__all__ = ["MadSettings", "prompts_for"]

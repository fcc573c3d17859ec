"""``mad``: Liang et al. (2024), Multi-Agent Debate with divergent thinking."""

from __future__ import annotations

from engine.protocols.mad import paper, robust
from engine.protocols.mad.prompts import MadPrompts
from engine.protocols.mad.settings import MadSettings
from engine.styles import ByStyle

prompts_for: ByStyle[MadPrompts] = ByStyle(paper=paper, robust=robust)

__all__ = ["MadSettings", "prompts_for"]

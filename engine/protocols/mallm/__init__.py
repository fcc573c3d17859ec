"""``mallm``: Kaesberg et al. (2025) decision protocols on one discussion engine."""

from __future__ import annotations

from engine.protocols.mallm import paper, robust
from engine.protocols.mallm.prompts import MallmPrompts
from engine.styles import ByStyle

prompts_for: ByStyle[MallmPrompts] = ByStyle(paper=paper, robust=robust)

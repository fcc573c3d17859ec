"""``mallm``: Kaesberg et al. (2025) decision protocols on one discussion engine."""

from __future__ import annotations

from debate_worker.engine.protocols.mallm import paper, robust
from debate_worker.engine.protocols.mallm.prompts import MallmPrompts
from debate_worker.engine.styles import ByStyle

prompts_for: ByStyle[MallmPrompts] = ByStyle(paper=paper, robust=robust)

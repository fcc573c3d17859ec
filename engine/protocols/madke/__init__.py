"""``madke``: knowledge-enhanced multi-agent debate (the MADKE paper's Algorithm 1), the default."""

from __future__ import annotations

from engine.protocols.madke import paper, robust
from engine.protocols.madke.prompts import MadkePrompts
from engine.styles import ByStyle

prompts_for: ByStyle[MadkePrompts] = ByStyle(paper=paper, robust=robust)

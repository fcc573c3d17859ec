"""``madke``: knowledge-enhanced multi-agent debate (the MADKE paper's Algorithm 1), the default."""

from __future__ import annotations

from engine.protocols.madke.paper import PAPER
from engine.protocols.madke.prompts import MadkePrompts
from engine.protocols.madke.robust import ROBUST
from engine.styles import ByStyle

prompts_for: ByStyle[MadkePrompts] = ByStyle(paper=PAPER, robust=ROBUST)

"""``madke``: knowledge-enhanced multi-agent debate (the MADKE paper's Algorithm 1), the default."""

from __future__ import annotations

from debate_worker.engine.protocols.madke import paper, robust
from debate_worker.engine.protocols.madke.prompts import MadkePrompts
from debate_worker.engine.styles import ByStyle

prompts_for: ByStyle[MadkePrompts] = ByStyle(paper=paper, robust=robust)

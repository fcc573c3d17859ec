"""``kks``: Wu et al. (2025), the stepwise Knight–Knave–Spy debate, with its team factors."""

from __future__ import annotations

from debate_worker.engine.protocols.kks import paper, robust
from debate_worker.engine.protocols.kks.prompts import KksPrompts
from debate_worker.engine.styles import ByStyle

prompts_for: ByStyle[KksPrompts] = ByStyle(paper=paper, robust=robust)

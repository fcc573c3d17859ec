"""Single-agent baselines of the MADKE paper (§4.2): ``single``, ``cot``, ``self_consistency``, ``rag``."""

from __future__ import annotations

from engine.protocols.baselines.paper import PAPER
from engine.protocols.baselines.prompts import BaselinePrompts
from engine.protocols.baselines.robust import ROBUST
from engine.styles import ByStyle

prompts_for: ByStyle[BaselinePrompts] = ByStyle(paper=PAPER, robust=ROBUST)

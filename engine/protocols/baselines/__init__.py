"""Single-agent baselines of the MADKE paper (§4.2): ``single``, ``cot``, ``self_consistency``, ``rag``."""

from __future__ import annotations

from engine.protocols.baselines import paper, robust
from engine.protocols.baselines.prompts import BaselinePrompts
from engine.styles import ByStyle

prompts_for: ByStyle[BaselinePrompts] = ByStyle(paper=paper, robust=robust)

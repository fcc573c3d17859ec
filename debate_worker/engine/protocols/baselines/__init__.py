"""Single-agent baselines of the MADKE paper (§4.2): ``single``, ``cot``, ``self_consistency``, ``rag``."""

from __future__ import annotations

from debate_worker.engine.protocols.baselines import paper, robust
from debate_worker.engine.protocols.baselines.prompts import BaselinePrompts
from debate_worker.engine.styles import ByStyle

prompts_for: ByStyle[BaselinePrompts] = ByStyle(paper=paper, robust=robust)

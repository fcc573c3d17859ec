"""``society``: Du et al. (2023), the "MAD" baseline of the MADKE paper."""

from __future__ import annotations

from engine.protocols.society import paper, robust
from engine.protocols.society.prompts import SocietyPrompts
from engine.styles import ByStyle

prompts_for: ByStyle[SocietyPrompts] = ByStyle(paper=paper, robust=robust)

"""``society``: Du et al. (2023), the "MAD" baseline of the MADKE paper."""

from __future__ import annotations

from engine.protocols.society.paper import PAPER
from engine.protocols.society.prompts import SocietyPrompts
from engine.protocols.society.robust import ROBUST
from engine.styles import ByStyle

prompts_for: ByStyle[SocietyPrompts] = ByStyle(paper=PAPER, robust=ROBUST)

"""``kks``: Wu et al. (2025), the stepwise Knight–Knave–Spy debate, with its team factors."""

from __future__ import annotations

from engine.protocols.kks.paper import PAPER
from engine.protocols.kks.parsing import (
    ROLES,
    parse_assignment,
    parse_role,
    players_from_question,
    render_assignment,
    team_answer,
)
from engine.protocols.kks.prompts import KksPrompts
from engine.protocols.kks.robust import ROBUST
from engine.styles import ByStyle

prompts_for: ByStyle[KksPrompts] = ByStyle(paper=PAPER, robust=ROBUST)

__all__ = [
    "ROLES",
    "parse_assignment",
    "parse_role",
    "players_from_question",
    "prompts_for",
    "render_assignment",
    "team_answer",
]

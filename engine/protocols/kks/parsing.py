"""Reading a KKS puzzle's players and the agents' role assignments, and the team's answer.

The engine's ``kks`` protocol parses with these; ``evaluation.kks.scoring`` scores with the same
parser, so a debate and its score never read an answer two ways. The team answer is the per-player
majority vote of the agents' assignments (ties go to the role named first in agent order, so the
result is deterministic).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from engine.jsontext import first_json_object

ROLES = ("knight", "knave", "spy")
_ROLE_WORD = "|".join(ROLES) + "|knights|knaves|spies"
_ROLE_KEY = re.compile(r"\"?\brole\"?\s*[:=]\s*\"?(knight|knave|spy)\b", re.I)


def role_of(word: str) -> str | None:
    """The role a word names (``Knight``, ``knaves``, ``spies`` …), or None for any other word."""
    w = word.strip().lower()
    for r in ROLES:
        if w == r or w == r + "s" or (r == "spy" and w == "spies"):
            return r
    return None


def parse_role(text: str | None) -> str | None:
    """One player's role in a reply: JSON ``role``, else a ``role: X`` pattern; never a guess."""
    data = first_json_object(text) or {}
    role = data.get("role")
    if isinstance(role, str) and role_of(role):
        return role_of(role)
    m = _ROLE_KEY.search(text or "")
    return m.group(1).lower() if m else None


def parse_assignment(text: str | None, players: Sequence[str]) -> dict[str, str]:
    """``{player: role}`` from JSON (``{"players": [{"name", "role"}]}`` or ``{name: role}``) or from
    text such as ``Rachel: knight, Violet = knave`` / ``Rachel is a knight``. Unknown players and words
    that are not roles are ignored; a player named twice keeps the last role named."""
    if not text:
        return {}
    data = first_json_object(text)
    found = _json_assignment(data, players) if data is not None else {}
    return found or _text_assignment(text, players)


def _json_assignment(data: Mapping[str, Any], players: Sequence[str]) -> dict[str, str]:
    known = {p.lower(): p for p in players}
    items = data.get("players")
    if isinstance(items, list):
        pairs = [
            (it["name"], it["role"])
            for it in items
            if isinstance(it, dict) and isinstance(it.get("name"), str) and isinstance(it.get("role"), str)
        ]
    else:
        pairs = [(str(k), v) for k, v in data.items() if isinstance(v, str)]
    out: dict[str, str] = {}
    for name_text, role_text in pairs:
        name, role = known.get(name_text.strip().lower()), role_of(role_text)
        if name and role:
            out[name] = role
    return out


def _text_assignment(text: str, players: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in players:
        pattern = rf"\b{re.escape(p)}\b\s*(?:[:=\-–]|is\s+(?:a|an|the)?|=>|->)\s*\**\s*({_ROLE_WORD})\b"
        found = re.findall(pattern, text, re.I)
        role = role_of(found[-1]) if found else None
        if role:
            out[p] = role
    return out


def render_assignment(assignment: Mapping[str, str], players: Sequence[str]) -> str:
    """``A: knight, B: knave`` in player order (the evaluation dataset's answer form)."""
    return ", ".join(f"{p}: {assignment[p]}" for p in players if p in assignment)


def team_answer(assignments: Sequence[Mapping[str, str]], players: Sequence[str]) -> dict[str, str]:
    """Per-player majority vote over the agents' assignments (Wu et al.'s team answer)."""
    team: dict[str, str] = {}
    for p in players:
        votes = [a[p] for a in assignments if p in a]
        if not votes:
            continue
        counts = Counter(votes)
        best = max(counts.values())
        team[p] = next(v for v in votes if counts[v] == best)
    return team


def players_from_question(question: str) -> list[str]:
    """Player names from the ``Player name: X`` lines of a puzzle question, in order."""
    names = []
    for line in question.splitlines():
        if line.strip().lower().startswith("player name:"):
            names.append(line.split(":", 1)[1].strip())
    return names

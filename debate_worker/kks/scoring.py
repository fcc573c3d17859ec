"""Reading a team's answer to a KKS puzzle and scoring it (Wu et al. App. B: Strict and Smooth).

The team answer is the per-player majority vote of the agents' assignments (ties go to the role named
first in agent order, so the result is deterministic).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from debate_worker.kks.puzzle import ROLES

_ROLE_WORD = "|".join(ROLES) + "|knights|knaves|spies"


def _role(word: str) -> str | None:
    w = word.lower()
    for r in ROLES:
        if w == r or w == r + "s" or (r == "spy" and w == "spies"):
            return r
    return None


def parse_assignment(text: str | None, players: Sequence[str]) -> dict[str, str]:
    """``{player: role}`` from JSON (``{"players": [{"name", "role"}]}`` or ``{name: role}``) or from
    text such as ``Rachel: knight, Violet = knave`` / ``Rachel is a knight``. Unknown players and words
    that are not roles are ignored; a player named twice keeps the last role named."""
    if not text:
        return {}
    known = {p.lower(): p for p in players}
    out: dict[str, str] = {}
    match = re.search(r"\{.*\}", text, re.S)
    if match:
        try:
            data = json.loads(match.group(0))
        except ValueError:
            data = None
        if isinstance(data, dict):
            items = data.get("players")
            if isinstance(items, list):
                for it in items:
                    if (
                        isinstance(it, dict)
                        and isinstance(it.get("name"), str)
                        and isinstance(it.get("role"), str)
                    ):
                        name, role = known.get(it["name"].strip().lower()), _role(it["role"].strip())
                        if name and role:
                            out[name] = role
            else:
                for k, v in data.items():
                    name = known.get(str(k).strip().lower())
                    role = _role(str(v).strip()) if isinstance(v, str) else None
                    if name and role:
                        out[name] = role
            if out:
                return out
    for p in players:
        pattern = rf"\b{re.escape(p)}\b\s*(?:[:=\-–]|is\s+(?:a|an|the)?|=>|->)\s*\**\s*({_ROLE_WORD})\b"
        found = re.findall(pattern, text, re.I)
        if found:
            role = _role(found[-1])
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


def score(predicted: Mapping[str, str], solution: Mapping[str, str]) -> tuple[float, float]:
    """(strict, smooth): 1.0 if every role is right, else 0.0; and the share of players right."""
    players = list(solution)
    if not players:
        return 0.0, 0.0
    right = sum(1 for p in players if predicted.get(p, "").lower() == solution[p].lower())
    return (1.0 if right == len(players) else 0.0), right / len(players)


def score_kks(answer_text: str | None, solution: Mapping[str, str]) -> tuple[float, float]:
    """Strict and Smooth accuracy of a debate's answer text against the puzzle's solution."""
    return score(parse_assignment(answer_text, list(solution)), solution)

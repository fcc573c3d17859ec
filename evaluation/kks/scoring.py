"""Scoring a team's answer to a KKS puzzle (Wu et al. App. B: Strict and Smooth).

The answer is read with the engine's ``kks`` parser (``engine.protocols.kks``), the same one the
protocol uses during a debate.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.protocols.kks import parse_assignment


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

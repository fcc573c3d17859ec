"""Knight–Knave–Spy puzzles (Wu et al. 2025): generator, exact solver, scoring, dataset files."""

from debate_worker.kks.dataset import load_kks, players_from_question, puzzle_question
from debate_worker.kks.scoring import parse_assignment, score_kks, team_answer

__all__ = [
    "load_kks",
    "parse_assignment",
    "players_from_question",
    "puzzle_question",
    "score_kks",
    "team_answer",
]

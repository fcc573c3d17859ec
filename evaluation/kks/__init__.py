"""Knight–Knave–Spy puzzles (Wu et al. 2025): generator, exact solver, scoring, dataset files."""

from engine.protocols.kks import parse_assignment, players_from_question, team_answer
from evaluation.kks.dataset import load_kks, puzzle_question
from evaluation.kks.scoring import score_kks

__all__ = [
    "load_kks",
    "parse_assignment",
    "players_from_question",
    "puzzle_question",
    "score_kks",
    "team_answer",
]

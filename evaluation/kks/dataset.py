"""KKS as an evaluation dataset: JSONL files of generated puzzles and the question text debaters see.

A record is ``{"id", "question", "solution": {player: role}, "players", "statements", "game", "size"}``;
``evaluation.datasets`` reads such files with its ``kks`` loader (it calls
``puzzle_question`` when a record has no ``question``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evaluation.kks.puzzle import game_text

INTRO = (
    "Knight-Knave-Spy game. Each player is a knight, a knave or a spy. Knights always tell the truth. "
    "Knaves always lie. Spies can either tell the truth or lie. The hints from the game manager are "
    "always true. Deduce the role of each player."
)


def puzzle_question(record: dict[str, Any]) -> str:
    """The question text for a puzzle record (game info in the paper's format, then the answer form)."""
    game = record.get("game")
    if not isinstance(game, str):
        game = game_text(record["players"], record["statements"])
    players = record.get("players") or list(record["solution"])
    form = ", ".join(f"{p}: <role>" for p in players)
    return f"{INTRO}\n{game}\nGive every player's role in the form: {form}"


def write_jsonl(records: Iterable[dict[str, Any]], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            count += 1
    return count


def load_kks(path: Path) -> list[dict[str, Any]]:
    """Puzzle records of a JSONL file (for the KKS protocol and tests; the evaluation harness uses
    ``evaluation.datasets.load_dataset``, which turns the same file into ``Item``s)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]

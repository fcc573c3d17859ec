"""Knight–Knave–Spy puzzles as evaluation items: Parley's generator's records and Wu et al.'s
published ControlMAD files.

The item contract (owned jointly with the protocols engineer, ``evaluation/kks/``): ``meta["solution"]``
is ``{player: role}`` with roles lower-cased ("knight", "knave", "spy"), ``answers`` is the solution
rendered as "A: knight, B: knave, …" so the text metrics still work. A record without its question
text is phrased by ``evaluation.kks.puzzle_question``; scoring (Strict/Smooth) is
``evaluation.kks.score_kks``.
"""

from __future__ import annotations

import re
from typing import Any

from engine.protocols.kks import players_from_question
from evaluation.items import Item, LineError, text_field
from evaluation.kks import puzzle_question


def render_solution(solution: dict[str, str]) -> str:
    """The gold answer text of a solution, ``A: knight, B: knave``: what the text metrics compare."""
    return ", ".join(f"{player}: {role}" for player, role in solution.items())


RAW_ROLES = {1: "knight", 2: "knave", 3: "spy"}  # ControlMAD's raw_solution codes
_SOLUTION_LINE = re.compile(r"^\s*(.+?)\s+is\s+an?\s+(knight|knave|spy)\s*\.?\s*$", re.IGNORECASE)


def load_controlmad_kks(record: dict[str, Any], default_id: str) -> Item:
    """A puzzle of Wu et al.'s published files (haolun-wu/ControlMAD ``groundtruth/<players>.jsonl``).

    ``text_game`` is what debaters see; the solution is read from ``text_solution`` (one
    ``Name is a role.`` line per player) and checked against ``raw_solution`` (1 knight, 2 knave,
    3 spy, in player order), so a file whose two solution fields disagree is reported, not scored."""
    game = text_field(record, "text_game")
    players = players_from_question(game)
    if not players:
        raise LineError("'text_game' has no 'Player name:' lines")
    solution: dict[str, str] = {}
    for line in text_field(record, "text_solution").splitlines():
        if not line.strip():
            continue
        m = _SOLUTION_LINE.match(line)
        if not m:
            raise LineError(f"'text_solution' line {line.strip()!r} is not 'Name is a role.'")
        solution[m.group(1).strip()] = m.group(2).lower()
    if sorted(solution) != sorted(players):
        raise LineError(
            f"'text_solution' names {', '.join(solution) or 'nobody'}; the game has {', '.join(players)}"
        )
    raw = record.get("raw_solution")
    if raw is not None:
        codes = (
            [RAW_ROLES.get(c) if isinstance(c, int) else None for c in raw] if isinstance(raw, list) else []
        )
        if codes != [solution[p] for p in players]:
            raise LineError("'raw_solution' disagrees with 'text_solution' (1 knight, 2 knave, 3 spy)")
    ordered = {p: solution[p] for p in players}
    game_id = record.get("game_id", record.get("id"))
    size = record.get("num_player", len(players))
    question = puzzle_question({"game": game.strip(), "players": players, "solution": ordered})
    return Item(
        id=str(game_id) if game_id is not None else default_id,
        question=question,
        answers=[render_solution(ordered)],
        kind="kks",
        meta={"solution": ordered, "difficulty": size, "players": players},
    )


def load_kks(record: dict[str, Any], default_id: str) -> Item:
    """Knight–Knave–Spy puzzle with its unique solution ``{player: role}`` (Parley's generator's
    records), or a ControlMAD record (``text_game``)."""
    if "text_game" in record:
        return load_controlmad_kks(record, default_id)
    solution = record.get("solution")
    if not isinstance(solution, dict) or not solution:
        raise LineError("'solution' must be a non-empty object {player: role}")
    if not all(isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in solution.items()):
        raise LineError("'solution' must map player names to role names")
    solution = {k.strip(): v.strip().lower() for k, v in solution.items()}
    # A record without its question text gets the KKS paper's phrasing of its game.
    question = record["question"] if isinstance(record.get("question"), str) else None
    question = text_field(record, "question", "puzzle") if question is not None else puzzle_question(record)
    return Item(
        id=str(record.get("id", default_id)),
        question=question,
        answers=[render_solution(solution)],
        kind="kks",
        meta={
            "solution": solution,
            **({"difficulty": record["difficulty"]} if "difficulty" in record else {}),
        },
    )

"""Knight–Knave–Spy: generator uniqueness checked by an independent brute force, scoring, the CLI.

The protocol itself is tested in ``tests/engine/protocols/test_kks.py``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from engine.protocols.kks import parse_assignment, team_answer
from engine.protocols.kks.runner import parse_role
from evaluation.datasets import load_dataset
from evaluation.kks.dataset import write_jsonl
from evaluation.kks.generator import generate_dataset
from evaluation.kks.puzzle import is_acyclic
from evaluation.kks.scoring import score_kks

pytestmark = pytest.mark.unit


# -- an independent reading of the rules: written from the statement schema, not from puzzle.py --
def _holds(st: dict[str, Any], roles: tuple[str, ...], says_truth: list[bool]) -> bool:
    kind = st["type"]
    role_of = roles.__getitem__
    if kind == 1:
        return role_of(st["a"]) == st["role"]
    if kind == 2:
        return role_of(st["a"]) != st["role"]
    if kind == 3:
        return says_truth[st["a"]]
    if kind == 4:
        return not says_truth[st["a"]]
    if kind == 5:
        return role_of(st["a"]) == role_of(st["b"])
    if kind == 6:
        return role_of(st["a"]) != role_of(st["b"])
    if kind == 7:
        return [says_truth[st["a"]], says_truth[st["b"]]].count(True) == 1
    if kind == 8:
        return [role_of(st["a"]), role_of(st["b"])].count(st["role"]) == 1
    if kind == 9:
        return st["role"] in (role_of(st["a"]), role_of(st["b"]))
    if kind == 10:
        return roles.count(st["role"]) % 2 == {"even": 0, "odd": 1}[st["parity"]]
    if kind == 11:
        liars = [j for j in st["group"] if not says_truth[j]]
        return len(liars) % 2 == {"even": 0, "odd": 1}[st["parity"]]
    if kind == 12:
        return (role_of(st["a"]) != st["role"]) or (role_of(st["b"]) == st["role2"])
    if kind == 13:
        return says_truth[st["a"]] and says_truth[st["b"]]
    if kind == 14:
        return [role_of(j) for j in st["group"]].count(st["role"]) == st["k"]
    if kind == 15:
        a, b = (_holds(s, roles, says_truth) for s in st["sub"])
        return a ^ b
    raise AssertionError(kind)


def brute_force(statements: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    n = len(statements)
    out = []
    for roles in itertools.product(("knight", "knave", "spy"), repeat=n):
        if roles.count("spy") != 1:
            continue
        says_truth: list[bool] = []
        ok = True
        for i, st in enumerate(statements):
            value = _holds(st, roles, says_truth)
            says_truth.append(value)
            if (roles[i] == "knight" and not value) or (roles[i] == "knave" and value):
                ok = False
                break
        if ok:
            out.append(roles)
    return out


@pytest.mark.parametrize("size", [4, 5, 6, 7, 8, 9])
def test_generated_puzzles_have_exactly_one_solution(size: int) -> None:
    for puzzle in generate_dataset([size], 2, seed=size):
        solutions = brute_force(puzzle.statements)
        assert len(solutions) == 1
        assert dict(zip(puzzle.players, solutions[0], strict=True)) == puzzle.solution
        assert is_acyclic(puzzle.statements)
        assert list(puzzle.solution.values()).count("spy") == 1


def test_generator_is_reproducible_and_uses_many_statement_types() -> None:
    a = [p.record() for p in generate_dataset([4, 5], 3, seed=7)]
    b = [p.record() for p in generate_dataset([4, 5], 3, seed=7)]
    assert a == b
    kinds = {st["type"] for p in generate_dataset([6, 7], 6, seed=1) for st in p.statements}
    assert len(kinds) >= 8


def test_dataset_file_loads_through_the_evaluation_registry(tmp_path: Path) -> None:
    path = tmp_path / "kks.jsonl"
    write_jsonl((p.record() for p in generate_dataset([4], 2, seed=3)), path)
    ds = load_dataset(path)
    assert ds.format == "kks" and len(ds.items) == 2 and not ds.problems
    item = ds.items[0]
    assert "Player name:" in item.question and "Message from the game manager" in item.question
    assert score_kks(item.answers[0], item.meta["solution"]) == (1.0, 1.0)


def test_scoring_strict_and_smooth() -> None:
    solution = {"Rachel": "knight", "Violet": "knight", "Olivia": "knave", "Peter": "spy"}
    assert score_kks("Rachel: knight, Violet: knight, Olivia: knave, Peter: spy", solution) == (1.0, 1.0)
    assert score_kks("Rachel is a knight. Violet = knave; Olivia: knave; Peter: spy", solution) == (0.0, 0.75)
    as_json = json.dumps({"players": [{"name": "Peter", "role": "spy"}], "explanation": "x"})
    assert score_kks(as_json, solution) == (0.0, 0.25)
    assert score_kks(None, solution) == (0.0, 0.0)
    assert parse_assignment("Rachel: wizard", list(solution)) == {}


def test_team_answer_is_a_per_player_majority() -> None:
    players = ["A", "B"]
    team = team_answer([{"A": "knight", "B": "spy"}, {"A": "knave", "B": "spy"}, {"A": "knave"}], players)
    assert team == {"A": "knave", "B": "spy"}
    # a tie goes to the role named first in agent order
    assert team_answer([{"A": "spy"}, {"A": "knight"}], players) == {"A": "spy"}


def test_parse_role() -> None:
    assert parse_role('{"player_role": "A", "role": "knave"}') == "knave"
    assert parse_role('"role": "spy", and more') == "spy"
    assert parse_role("knight/knave/spy") is None


def test_cli_generate_and_check(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from parley_cli import build_app

    app = build_app()
    out = tmp_path / "p.jsonl"
    runner = CliRunner()
    result = runner.invoke(
        app, ["kks", "generate", "--sizes", "4-5", "--per-size", "2", "--seed", "3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 4
    assert runner.invoke(app, ["kks", "check", str(out)]).exit_code == 0
    bad = runner.invoke(app, ["kks", "generate", "--sizes", "four", "--out", str(out)])
    assert bad.exit_code != 0 and "sizes" in bad.output

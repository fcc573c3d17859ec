"""The papers' published layouts: MADKE's JSON arrays with their own pools, ControlMAD's KKS puzzles,
CIAR and any JSON array, MMLU-style multiple choice and FEVER; bad records with line and array index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluation.datasets import DatasetError, load_dataset
from evaluation.scoring import score_answer
from services.knowledge import KnowledgeItem, KnowledgePool
from tests.evaluation.conftest import write_jsonl

pytestmark = pytest.mark.unit

FORMATS = Path(__file__).resolve().parents[2] / "data" / "formats"
needs_examples = pytest.mark.skipif(not FORMATS.exists(), reason="shared format examples not present")


def write_array(path: Path, records: list[Any], indent: int = 4) -> Path:
    path.write_text(json.dumps(records, indent=indent))
    return path


def madke_record(question: str, answer: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "question": question,
        "answer": answer,
        "wiki_retrieval": [
            {"id": "w1", "contents": "Title A\nFirst wiki passage.", "score": 70.5},
            {"id": "w2", "contents": "Title B\nSecond wiki passage.", "score": 69.0},
            {"id": "w3", "contents": "Title C\n", "score": 60.0},  # no text: dropped and counted
        ],
        "google_retrieval": [{"contents": "Snippet without a title line."}, {"contents": ""}],
        **extra,
    }


@needs_examples
def test_shared_madke_example_keeps_its_pool() -> None:
    ds = load_dataset(FORMATS / "madke_data_example.json")
    assert ds.format == "madke" and ds.layout == "json-array" and not ds.problems
    item = ds.items[0]
    assert item.kind == "qa" and item.answers == ["Arno", "the Arno"]
    assert item.pool is not None
    assert [(k.n, k.source, k.title) for k in item.pool.items] == [
        (1, "wikipedia", "Florence"),
        (2, "wikipedia", "Arno"),
        (3, "web", ""),
    ]
    assert item.pool.items[0].text == "Florence is the capital of Tuscany. The city lies on the River Arno."
    assert item.pool.items[0].score == 71.2
    assert score_answer(item, "the Arno").em == 1.0


@needs_examples
def test_shared_controlmad_and_ciar_examples() -> None:
    kks = load_dataset(FORMATS / "controlmad_kks_example.jsonl")
    assert kks.format == "kks"
    item = kks.items[0]
    assert item.id == "1" and item.meta["solution"] == {"Ada": "knight", "Ben": "knave", "Cy": "spy"}
    assert item.meta["difficulty"] == 3
    assert "Player name: Ada" in item.question and "Message from the game manager" in item.question
    strict = score_answer(item, "Ada: knight, Ben: knave, Cy: spy")
    assert strict.strict == 1.0 and strict.correct == 1.0
    half = score_answer(item, "Ada is a knight. Ben is a spy. Cy is a knave.")
    assert half.strict == 0.0 and half.smooth == pytest.approx(1 / 3)

    ciar = load_dataset(FORMATS / "ciar_example.json")
    assert ciar.format == "ciar" and ciar.layout == "json-array"
    q = ciar.items[0]
    assert q.kind == "math" and q.answers == ["40"] and q.meta["incorrect_answer"] == ["45"]
    assert q.line == 2 and q.index == 0
    assert score_answer(q, "40 km/h").correct == 1.0
    assert score_answer(q, "45").correct == 0.0


def test_madke_kinds_pools_and_dropped_entries(tmp_path: Path) -> None:
    path = write_array(
        tmp_path / "test_all_retrieval_500.json",
        [
            madke_record("which river flows through florence", ["Arno", "the Arno"]),
            madke_record("Florence lies on the Arno.", ["SUPPORTS"]),
            madke_record(
                "Which body cavity contains the pituitary gland?\n(A) Abdominal\n(B) Cranial\n(C) Pleural\n"
                "(D) Spinal",
                ["(B) Cranial"],
            ),
        ],
    )
    ds = load_dataset(path)
    assert ds.format == "madke"
    qa, fever, mc = ds.items
    assert [qa.kind, fever.kind, mc.kind] == ["qa", "fever", "mc"]
    assert [it.id for it in ds.items] == ["index-0", "index-1", "index-2"]
    # Each record: 2 of 3 wiki entries and 1 of 2 web entries have text.
    assert ds.pool_items_dropped == 6 and ds.items_with_pools == 3
    assert qa.meta["pool_dropped"] == 2
    assert qa.pool is not None and [k.source for k in qa.pool.items] == ["wikipedia", "wikipedia", "web"]
    assert qa.pool.items[2].title == "" and qa.pool.items[2].text == "Snippet without a title line."
    assert fever.answers == ["SUPPORTS"] and "Florence lies on the Arno." in fever.question
    assert score_answer(fever, "[SUPPORTS]").correct == 1.0
    assert mc.answers == ["B", "Cranial"] and mc.meta["choices"] == [
        "Abdominal",
        "Cranial",
        "Pleural",
        "Spinal",
    ]
    assert "(B) Cranial" in mc.question
    assert score_answer(mc, "(B) Cranial").correct == 1.0 and score_answer(mc, "A").correct == 0.0


def test_pool_cut_to_the_configuration() -> None:
    pool = KnowledgePool(
        pool_id="p",
        question="q",
        items=[
            KnowledgeItem(n=1, source="wikipedia", title="a", text="a"),
            KnowledgeItem(n=2, source="wikipedia", title="b", text="b"),
            KnowledgeItem(n=3, source="web", title="c", text="c"),
        ],
    )
    assert [(k.n, k.title) for k in pool.limited(1, 5).items] == [(1, "a"), (2, "c")]
    assert [(k.n, k.title) for k in pool.limited(0, 1).items] == [(1, "c")]


def test_bad_array_records_reported_with_line_and_index(tmp_path: Path) -> None:
    path = write_array(
        tmp_path / "d.json",
        [
            madke_record("good question", ["x"]),
            {"answer": ["x"], "wiki_retrieval": []},  # no question
            madke_record("bad pool", ["y"], google_retrieval="not a list"),
            "not an object",
            madke_record("another good one", ["z"]),
        ],
    )
    ds = load_dataset(path)
    assert [it.question for it in ds.items] == ["good question", "another good one"]
    assert [p.index for p in ds.problems] == [1, 2, 3]
    lines = path.read_text().splitlines()
    # Each reported line is where that record starts in the file.
    for p in ds.problems[:2]:
        assert lines[p.line - 1].strip() == "{"
    assert "missing or empty field 'question'" in str(ds.problems[0])
    assert str(ds.problems[0]).startswith(f"line {ds.problems[0].line} (array index 1):")
    assert "'google_retrieval' must be a list" in ds.problems[1].reason
    with pytest.raises(DatasetError, match=r"array index 1\): missing or empty field 'question'"):
        load_dataset(path, on_error="fail")


def test_broken_array_keeps_what_came_before(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text(
        '[\n  {"question": "q1", "answer": ["1/2"], "incorrect answer": ["1"]},\n  {"question": oops}\n]'
    )
    ds = load_dataset(path)
    assert [it.question for it in ds.items] == ["q1"]
    assert ds.problems[0].line == 3 and "invalid JSON" in ds.problems[0].reason


def test_any_json_array_and_numeric_format(tmp_path: Path) -> None:
    nq = load_dataset(write_array(tmp_path / "nq.json", [{"question": "who?", "answers": ["X", "Y"]}]))
    assert nq.format == "nq" and nq.items[0].answers == ["X", "Y"] and nq.items[0].id == "index-0"
    maths = load_dataset(
        write_jsonl(tmp_path / "m.jsonl", [{"id": "a", "question": "half of 3?", "answer": "1.5"}]),
        fmt="numeric",
    )
    assert maths.items[0].kind == "math"
    for form in ("3/2", "1.50", "1.5 m/s"):
        assert score_answer(maths.items[0], form).correct == 1.0, form
    with pytest.raises(DatasetError, match="no usable items"):
        load_dataset(write_jsonl(tmp_path / "w.jsonl", [{"question": "q", "answer": "words"}]), fmt="ciar")


def test_controlmad_solution_fields_must_agree(tmp_path: Path) -> None:
    game = (
        "---\nPlayer name: Ada\nPlayer statement: I am a knight.\n"
        "---\nPlayer name: Ben\nPlayer statement: Among the following two statements, exactly one is true: "
        "\n (1). I am a knave.\n (2). Ada is lying.\n---\n"
    )
    good = {
        "game_id": 7,
        "num_player": 2,
        "text_game": game,
        "text_solution": "Ada is a knight.\nBen is a spy.\n",
        "raw_solution": [1, 3],
    }
    wrong_raw = {**good, "game_id": 8, "raw_solution": [1, 2]}
    stranger = {
        **good,
        "game_id": 9,
        "text_solution": "Ada is a knight.\nCy is a spy.\n",
        "raw_solution": None,
    }
    ds = load_dataset(write_jsonl(tmp_path / "2.jsonl", [good, wrong_raw, stranger]))
    assert [it.id for it in ds.items] == ["7"]
    assert ds.items[0].meta["solution"] == {"Ada": "knight", "Ben": "spy"}
    assert "\n (2). Ada is lying." in ds.items[0].question  # ControlMAD's multi-line statements kept
    assert [p.line for p in ds.problems] == [2, 3]
    assert "raw_solution" in ds.problems[0].reason and "the game has Ada, Ben" in ds.problems[1].reason


def test_multiple_choice_layouts(tmp_path: Path) -> None:
    ds = load_dataset(
        write_jsonl(
            tmp_path / "mmlu.jsonl",
            [
                {"question": "2+2?", "A": "3", "B": "4", "C": "5", "D": "6", "answer": "B"},
                {"question": "Capital of Italy?", "options": {"A": "Paris", "B": "Rome"}, "answer": "(B)"},
                {"question": "Largest?", "choices": ["Mars", "Jupiter"], "answer": "Jupiter"},
                {"question": "Pick", "choices": ["x", "y"], "answer": "C"},
            ],
        )
    )
    assert ds.format == "mc"
    assert [it.answers for it in ds.items] == [["B", "4"], ["B", "Rome"], ["B", "Jupiter"]]
    assert ds.problems[0].line == 4 and "answer" in ds.problems[0].reason

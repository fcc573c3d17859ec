"""Dataset loading: the four formats, autodetection, and bad lines reported with their numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.datasets import DatasetError, load_dataset
from tests.evaluation.conftest import write_jsonl

pytestmark = pytest.mark.unit

SHARED_NQ = Path(__file__).resolve().parents[2] / "data" / "nq_open_vital_dev.jsonl"


def test_nq_autodetected_with_aliases(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [{"id": "a", "question": " who? ", "answers": ["X", "Y"]}, {"question": "what?", "answer": "Z"}],
    )
    ds = load_dataset(path)
    assert ds.format == "nq"
    assert [it.id for it in ds.items] == ["a", "line-2"]
    assert ds.items[0].question == "who?"
    assert ds.items[1].answers == ["Z"]
    assert ds.items[1].line == 2


@pytest.mark.skipif(not SHARED_NQ.exists(), reason="shared evaluation data not present")
def test_shared_nq_dev_slice_loads() -> None:
    ds = load_dataset(SHARED_NQ, limit=5)
    assert ds.format == "nq" and len(ds.items) == 5 and not ds.problems
    assert all(it.answers for it in ds.items)


def test_fever_mc_and_kks(tmp_path: Path) -> None:
    fever = load_dataset(
        write_jsonl(
            tmp_path / "f.jsonl",
            [
                {"id": 1, "claim": "Paris is in France.", "label": "SUPPORTS"},
                {"id": 2, "claim": "x", "label": "not_enough_info"},
            ],
        )
    )
    assert fever.format == "fever"
    assert fever.items[0].answers == ["SUPPORTS"] and "Paris is in France." in fever.items[0].question
    assert fever.items[1].answers == ["NOT ENOUGH INFO"]
    mc = load_dataset(
        write_jsonl(
            tmp_path / "m.jsonl",
            [
                {"question": "Capital of Italy?", "choices": ["Paris", "Rome"], "answer": "B"},
                {"question": "2+2?", "options": ["3", "4", "5"], "answer": 1},
            ],
        )
    )
    assert mc.format == "mc"
    assert mc.items[0].answers == ["B", "Rome"] and "(B) Rome" in mc.items[0].question
    assert mc.items[1].answers == ["B", "4"]
    kks = load_dataset(
        write_jsonl(
            tmp_path / "k.jsonl",
            [{"id": "p1", "question": "A says B is a knave...", "solution": {"A": "Knight", "B": "knave"}}],
        )
    )
    assert kks.format == "kks"
    assert kks.items[0].meta["solution"] == {"A": "knight", "B": "knave"}
    assert kks.items[0].answers == ["A: knight, B: knave"]


def test_bad_lines_reported_with_numbers_and_skipped(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"id": "a", "question": "q1", "answers": ["x"]},
            "{not json",
            {"id": "b", "question": "q2", "answers": []},
            '["a list"]',
            {"id": "a", "question": "q3", "answers": ["y"]},
            {"id": "c", "question": "q4", "answers": ["z"]},
        ],
    )
    ds = load_dataset(path)
    assert [it.id for it in ds.items] == ["a", "c"]
    assert [p.line for p in ds.problems] == [2, 3, 4, 5]
    assert "invalid JSON" in ds.problems[0].reason
    assert "answers" in ds.problems[1].reason
    assert "duplicate id 'a'" in ds.problems[3].reason


def test_bad_line_fatal_when_asked(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "q1", "answers": ["x"]}, "{oops"])
    with pytest.raises(DatasetError, match="line 2: invalid JSON"):
        load_dataset(path, on_error="fail")


def test_limit_counts_good_items_and_format_errors(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "d.jsonl", ["{bad", *({"question": f"q{i}", "answers": ["a"]} for i in range(5))]
    )
    ds = load_dataset(path, limit=3)
    assert len(ds.items) == 3 and len(ds.problems) == 1
    with pytest.raises(DatasetError, match="no usable items"):
        load_dataset(write_jsonl(tmp_path / "e.jsonl", [{"foo": 1}]))
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(tmp_path / "missing.jsonl")
    with pytest.raises(DatasetError, match="no usable items"):
        load_dataset(path, fmt="mc")

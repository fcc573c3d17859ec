"""A split of a dataset (``--slice``, an experiment file's ``slice``): the held-out questions of a
study are named once, by position among the usable items, and a results folder keeps to one split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.datasets import DatasetError, load_dataset, parse_slice
from evaluation.experiment import load_experiment
from evaluation.experiment_text import ExperimentError
from parley_cli import build_app
from tests.evaluation.conftest import QUESTIONS, write_jsonl
from tests.evaluation.test_cli import env_for, runner
from tests.evaluation.test_experiment import GRID, write
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit

app = build_app()

TEN = [{"id": f"q{i}", "question": f"question {i}", "answers": ["a"]} for i in range(10)]


def test_a_slice_picks_by_position_among_the_usable_items(tmp_path: Path) -> None:
    # A bad line does not shift the positions: they count usable items, as --limit does.
    path = write_jsonl(tmp_path / "d.jsonl", [TEN[0], "{bad", *TEN[1:]])
    odd = load_dataset(path, select=parse_slice("1:10:2"))
    assert [it.id for it in odd.items] == ["q1", "q3", "q5", "q7", "q9"]
    assert len(odd.problems) == 1
    # --limit counts within the split.
    assert [it.id for it in load_dataset(path, select=parse_slice("1::2"), limit=2).items] == ["q1", "q3"]
    assert [it.id for it in load_dataset(path, select=parse_slice(":3")).items] == ["q0", "q1", "q2"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("3", "not START:STOP"),
        ("-3:", "not START:STOP"),
        ("a:b", "not START:STOP"),
        ("1:5:0", "STEP must be at least 1"),
        ("5:5", "selects nothing"),
        ("1:2:3:4", "not START:STOP"),
    ],
)
def test_a_bad_slice_says_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(DatasetError, match=words):
        parse_slice(text)


def test_a_slice_past_the_end_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", TEN)
    with pytest.raises(DatasetError, match="selects none of its 10 usable items"):
        load_dataset(path, select=parse_slice("20:30"))


@pytest.mark.integration
def test_the_cli_runs_a_split_and_a_folder_keeps_to_it(scripted: ScriptedLLM, tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    out = tmp_path / "held-out"
    args = ["eval", "--dataset", str(dataset), "--out", str(out), "--protocols", "single", "--no-progress"]
    args += ["--bootstrap-samples", "100", "--no-plots"]
    result = runner.invoke(app, [*args, "--slice", "1::2"], env=env_for(scripted))
    assert result.exit_code == 0, result.output
    results = [json.loads(line) for line in (out / "results" / "single.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in results) == ["q2", "q4"]
    assert json.loads((out / "eval.json").read_text())["select"] == "1::2"
    # Another split (or none) into the same folder would mix two question sets under one report.
    other = runner.invoke(app, [*args, "--slice", "0::2"], env=env_for(scripted))
    assert other.exit_code != 0
    assert "--slice 1::2" in other.output and "new --out" in other.output
    whole = runner.invoke(app, args, env=env_for(scripted))
    assert whole.exit_code != 0 and "--slice 1::2" in whole.output
    bad = runner.invoke(app, [*args, "--out", str(tmp_path / "x"), "--slice", "2:1"], env=env_for(scripted))
    assert bad.exit_code != 0 and "selects nothing" in bad.output
    assert "Traceback" not in bad.output


def test_an_experiment_names_its_split_and_a_bad_one_is_refused_at_its_line(tmp_path: Path) -> None:
    text = GRID.replace('path = "nq.jsonl"', 'path = "nq.jsonl"\nslice = "1::2"')
    experiment = load_experiment(write(tmp_path, text))
    assert {r.select for c in experiment.cells for r in c.requests} == {"1::2"}
    for bad, words in (("9:", "selects none of its 4 usable items"), ("1:2:0", "STEP must be at least 1")):
        wrong = GRID.replace('path = "nq.jsonl"', f'path = "nq.jsonl"\nslice = "{bad}"')
        with pytest.raises(ExperimentError) as caught:
            load_experiment(write(tmp_path, wrong))
        assert "line 9" in str(caught.value) and words in str(caught.value)

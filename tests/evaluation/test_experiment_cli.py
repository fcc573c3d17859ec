"""``parley eval --experiment FILE`` end to end on a scripted OpenAI-compatible server: a 2 × 2 grid is
one command, one folder per cell and one study report; a second run resumes with no model call; a file
with a mistake anywhere is refused before the first call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parley_cli import build_app
from tests.evaluation.conftest import QUESTIONS, write_jsonl
from tests.evaluation.test_cli import env_for
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

STUDY = """\
[study]
name = "grid"
out = "study"
baseline = "single"
bootstrap_samples = 200

[[datasets]]
name = "nq"
path = "nq.jsonl"

[grid]
samples = [2, 3]
temperature = [0.2, 0.7]

[[runs]]
protocols = ["single", "self_consistency"]
"""


def test_a_grid_runs_as_one_study_and_resumes(scripted: ScriptedLLM, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    study = tmp_path / "grid.toml"
    study.write_text(STUDY)
    app, runner = build_app(), CliRunner()
    args = ["eval", "--experiment", str(study), "--no-progress"]
    first = runner.invoke(app, args, env=env_for(scripted))
    assert first.exit_code == 0, first.output
    assert "cell 4/4: samples=3,temperature=0.7" in first.output
    out = tmp_path / "study"
    report = json.loads((out / "study.json").read_text())
    assert [c["label"] for c in report["cells"]] == [
        "samples=2,temperature=0.2",
        "samples=2,temperature=0.7",
        "samples=3,temperature=0.2",
        "samples=3,temperature=0.7",
    ]
    assert len(report["runs"]) == 8 and all(r["n"] == len(QUESTIONS) for r in report["runs"])
    # every vote is compared with its own cell's single run, over the same questions
    pairs = {(c["a"], c["b"]): c for c in report["comparisons"]}
    assert ("samples=3,temperature=0.7/single", "samples=3,temperature=0.7/self_consistency") in pairs
    assert all(c["n"] == len(QUESTIONS) for c in pairs.values())
    # the cells really ran with their grid point's settings
    manifest = json.loads((out / "samples=3_temperature=0.7" / "eval.json").read_text())
    vote = next(r for r in manifest["runs"] if r["label"] == "self_consistency")
    assert vote["config"]["samples"] == 3 and vote["config"]["temperature"] == 0.7
    assert (out / "study.md").read_text().startswith("# Study grid")
    assert (out / "plots" / "study_accuracy.png").stat().st_size > 1000
    provenance = (out / "samples=2_temperature=0.2" / "provenance.jsonl").read_text().splitlines()
    assert json.loads(provenance[0])["model"]["model"] == "scripted"

    called = len(scripted.requests)
    again = runner.invoke(app, args, env=env_for(scripted))
    assert again.exit_code == 0, again.output
    assert len(scripted.requests) == called  # finished items are skipped

    only = runner.invoke(app, [*args, "--report-only", "--no-plots"], env=env_for(scripted))
    assert only.exit_code == 0 and "study report:" in only.output


def test_a_wrong_file_calls_nothing(scripted: ScriptedLLM, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    study = tmp_path / "grid.toml"
    # the last cell's setting is the wrong one: nothing runs, not even the first cells
    study.write_text(STUDY.replace("samples = [2, 3]", "samples = [2, 3, 0]"))
    result = CliRunner().invoke(build_app(), ["eval", "--experiment", str(study)], env=env_for(scripted))
    assert result.exit_code == 2
    assert "line 12" in result.output and "samples" in result.output
    assert scripted.requests == [] and not (tmp_path / "study").exists()


def test_options_the_file_owns_are_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        build_app(), ["eval", "--experiment", str(tmp_path / "x.toml"), "--protocols", "rag", "--limit", "3"]
    )
    assert result.exit_code == 2
    assert "experiment file sets these" in result.output


def test_a_model_its_endpoint_does_not_serve_is_refused_before_any_cell(
    scripted: ScriptedLLM, tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    study = tmp_path / "grid.toml"
    models = (
        f'\n[[models]]\nname = "first"\nbase_url = "{scripted.base_url}"\nmodel = "scripted"\n'
        f'\n[[models]]\nname = "second"\nbase_url = "{scripted.base_url}"\nmodel = "scripted-typo"\n'
    )
    study.write_text(STUDY + models)
    result = CliRunner().invoke(build_app(), ["eval", "--experiment", str(study)], env=env_for(scripted))
    assert result.exit_code == 1, result.output
    assert "scripted-typo" in result.output and "ModelNotServed" in result.output
    assert scripted.requests == []  # the first model's cells did not run either


def test_interleaved_cells_advance_together(scripted: ScriptedLLM, tmp_path: Path) -> None:
    """``interleave = 1``: both cells answer question 1, then both question 2, … (an interruption leaves
    them on the same questions); a second run makes no call."""
    write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    study = tmp_path / "steps.toml"
    study.write_text(
        STUDY.replace("bootstrap_samples = 200", "bootstrap_samples = 200\ninterleave = 1")
        .replace("samples = [2, 3]\n", "")
        .replace('protocols = ["single", "self_consistency"]', 'protocols = ["single"]')
    )
    app, runner = build_app(), CliRunner()
    args = ["eval", "--experiment", str(study), "--no-progress", "--no-plots"]
    ran = runner.invoke(app, args, env=env_for(scripted))
    assert ran.exit_code == 0, ran.output
    asked = [
        next(q["question"] for q in QUESTIONS if q["question"] in json.dumps(body["messages"]))
        for body in scripted.requests
    ]
    order = [q["question"] for q in QUESTIONS]
    # two cells (temperature 0.2 and 0.7), one call per question each: question by question
    assert asked == [q for q in order for _ in range(2)]
    temperatures = [body["temperature"] for body in scripted.requests]
    assert temperatures == [0.2, 0.7] * len(order)
    assert "questions 1–2" in ran.output
    report = json.loads((tmp_path / "study" / "study.json").read_text())
    assert all(r["n"] == len(QUESTIONS) for r in report["runs"])
    called = len(scripted.requests)
    again = runner.invoke(app, args, env=env_for(scripted))
    assert again.exit_code == 0, again.output
    assert len(scripted.requests) == called

    # a study stopped mid-step leaves cells' reports behind their results: --report-only rebuilds them
    cells = [tmp_path / "study" / c["folder"] for c in report["runs"]]
    for cell in cells:
        (cell / "metrics.json").unlink()
    only = runner.invoke(app, [*args, "--report-only"], env=env_for(scripted))
    assert only.exit_code == 0, only.output
    assert len(scripted.requests) == called
    for cell in cells:
        rebuilt = json.loads((cell / "metrics.json").read_text())
        assert [r["ok"] for r in rebuilt["runs"]] == [len(QUESTIONS)]

"""Scoring stored answers again with another metric: no model runs, answers and costs stay, only the
scores, the manifest's primary and the report change; a rescore that cannot finish writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evaluation.items import Item
from evaluation.judge import JudgeVerdict
from evaluation.rescore import rescore_workspace
from evaluation.scoring import score_answer
from evaluation.store import Manifest, ResultRecord, RunSpec, Workspace, WorkspaceError
from parley_cli import build_app

ITEMS = [
    Item(id="a", question="what is the capital of france", answers=["Paris"]),
    Item(id="b", question="who wrote hamlet", answers=["William Shakespeare", "Shakespeare"]),
    Item(id="c", question="what is the persian gulf war also called", answers=["Gulf War"]),
]
# a right answer; a list of candidates (contains credits it, the strict contains does not); a right
# answer with the judge's verdict stored; nothing but the question's own words.
ANSWERS = {"a": "Paris", "b": "Marlowe, Shakespeare, Bacon", "c": "the Persian Gulf War"}


def _workspace(root: Path, *, judged: bool = True) -> Workspace:
    ws = Workspace(root)
    ws.save_items(ITEMS)
    ws.save_manifest(
        Manifest(
            dataset="nq.jsonl",
            format="nq",
            primary="contains",
            runs=[RunSpec(label="madke", protocol="madke", prompt_style="robust", config={})],
        )
    )
    for index, item in enumerate(ITEMS):
        answer = ANSWERS[item.id]
        verdict = JudgeVerdict(verdict=item.id == "a") if judged or item.id == "a" else None
        ws.write_result(
            ResultRecord(
                id=item.id,
                index=index,
                run="madke",
                protocol="madke",
                prompt_style="robust",
                status="ok",
                question=item.question,
                gold=item.answers,
                answer=answer,
                scores=score_answer(item, answer, primary="contains"),
                judge=verdict,
                prompt_tokens=100 + index,
                seconds=10.0 + index,
            )
        )
    ws.write_result(
        ResultRecord(
            id="d",
            index=3,
            run="madke",
            protocol="madke",
            prompt_style="robust",
            status="failed",
            error="timeout",
            question="q",
            gold=["x"],
        )
    )
    return ws


def test_rescore_changes_only_the_scores_and_records_the_new_primary(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    before = ws.load_results("madke")
    assert [before[i].scores.correct for i in "abc"] == [1.0, 1.0, 1.0]  # type: ignore[union-attr]

    summary = rescore_workspace(ws, "strict_contains")

    after = ws.load_results("madke")
    assert [after[i].scores.correct for i in "abc"] == [1.0, 0.0, 0.0]  # type: ignore[union-attr]
    assert (summary.before, summary.after) == ("contains", "strict_contains")
    (run,) = summary.runs
    assert (run.scored, run.changed) == (3, 2)
    assert run.correct_before == pytest.approx(1.0) and run.correct_after == pytest.approx(1 / 3)
    for item_id in "abc":  # answers, costs and verdicts are the run's, untouched
        assert after[item_id].answer == before[item_id].answer
        assert after[item_id].prompt_tokens == before[item_id].prompt_tokens
        assert after[item_id].seconds == before[item_id].seconds
        assert after[item_id].judge == before[item_id].judge
    assert after["d"].status == "failed" and after["d"].scores is None
    assert ws.load_manifest().primary == "strict_contains"  # type: ignore[union-attr]


def test_rescore_with_the_judge_uses_stored_verdicts_and_refuses_when_one_is_missing(tmp_path: Path) -> None:
    judged = _workspace(tmp_path / "judged")
    rescore_workspace(judged, "judge")
    assert [judged.load_results("madke")[i].scores.correct for i in "abc"] == [1.0, 0.0, 0.0]  # type: ignore[union-attr]

    ws = _workspace(tmp_path / "unjudged", judged=False)
    files = {p: p.read_bytes() for p in (ws.manifest_path, ws.results_path("madke"))}
    with pytest.raises(WorkspaceError, match="not graded"):
        rescore_workspace(ws, "judge")
    assert {p: p.read_bytes() for p in files} == files  # nothing written


def test_cli_rescores_then_rebuilds_the_report(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _workspace(out)
    runner, app = CliRunner(), build_app()
    refused = runner.invoke(app, ["eval", "--out", str(out), "--rescore"])
    assert refused.exit_code == 2 and "--report-only" in refused.output

    result = runner.invoke(
        app,
        ["eval", "--out", str(out), "--report-only", "--rescore", "--no-plots", "--bootstrap-samples", "200"],
    )
    assert result.exit_code == 0, result.output
    assert "contains → strict_contains" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["primary"] == "strict_contains"
    (run,) = metrics["runs"]
    assert run["accuracy"] == pytest.approx(1 / 3)
    assert run["contains"] == pytest.approx(1.0)  # the old metric stays in the report by its name

    empty = runner.invoke(app, ["eval", "--out", str(tmp_path / "none"), "--report-only", "--rescore"])
    assert empty.exit_code == 2 and "no evaluation" in empty.output

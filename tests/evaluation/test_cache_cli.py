"""``parley eval`` with the call cache (on by default in this process): the same run again from scratch
makes no model call and gives the same answers; ``--cache-only`` fails on a call it lacks, naming it;
``--no-cache`` calls the model."""

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


def answers(out: Path) -> list[str | None]:
    return [json.loads(x)["answer"] for x in (out / "results" / "cot.jsonl").read_text().splitlines()]


def test_a_rerun_replays_from_the_cache(scripted: ScriptedLLM, tmp_path: Path) -> None:
    app, runner = build_app(), CliRunner()
    dataset = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    out = tmp_path / "run"
    args = ["eval", "--dataset", str(dataset), "--out", str(out), "--protocols", "cot", "--no-progress"]
    args += ["--no-plots", "--bootstrap-samples", "200", "--set", "temperature=0.7"]
    first = runner.invoke(app, args, env=env_for(scripted))
    assert first.exit_code == 0, first.output
    called = len(scripted.requests)
    assert called == len(QUESTIONS)
    before = answers(out)

    again = runner.invoke(app, [*args, "--fresh"], env=env_for(scripted))
    assert again.exit_code == 0, again.output
    assert len(scripted.requests) == called  # every call replayed
    assert answers(out) == before
    assert "4 replayed, 0 called" in again.output
    report = (out / "report.md").read_text()
    assert "call cache: 4 of 4 model calls replayed (100.0 %)" in report
    assert "the latest invocation ran with the cache on" in report
    assert "sampling seed: none (the server's own)" in report

    more = write_jsonl(
        tmp_path / "more.jsonl",
        [{"id": "n1", "question": "what is the tallest mountain", "answers": ["Everest"]}],
    )
    only = runner.invoke(
        app,
        [
            "eval",
            "--dataset",
            str(more),
            "--out",
            str(tmp_path / "only"),
            "--protocols",
            "cot",
            "--no-progress",
            "--cache-only",
        ],
        env=env_for(scripted),
    )
    results = [json.loads(x) for x in (tmp_path / "only" / "results" / "cot.jsonl").read_text().splitlines()]
    assert results[0]["status"] == "failed" and "CallCacheMiss" in results[0]["error"]
    assert "--cache-only forbids calling the model" in results[0]["error"]
    assert len(scripted.requests) == called and only.exit_code in (0, 3)

    fresh = runner.invoke(app, [*args, "--fresh", "--no-cache"], env=env_for(scripted))
    assert fresh.exit_code == 0, fresh.output
    assert len(scripted.requests) == called + len(QUESTIONS)

"""``parley eval`` through the real CLI entry (typer app), in-process and via the API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parley_cli import build_app
from tests.evaluation.conftest import QUESTIONS, write_jsonl
from tests.evaluation.test_api_mode import KEY, ContractGateway
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

app = build_app()
runner = CliRunner()


def env_for(llm: ScriptedLLM) -> dict[str, str]:
    return {
        "PARLEY_LLM_BASE_URL": llm.base_url,
        "PARLEY_LLM_MODEL": "scripted",
        "PARLEY_LLM_MAX_ATTEMPTS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def test_cli_in_process_styles_and_compare(scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    args = [
        "eval",
        "--dataset",
        str(nq_dataset),
        "--out",
        str(out),
        "--protocols",
        "single,cot",
        "--prompt-styles",
        "paper,robust",
        "--compare",
        "single-robust:cot-robust",
        "--no-progress",
        "--bootstrap-samples",
        "200",
        "--set",
        "temperature=0.2",
    ]
    result = runner.invoke(app, args, env=env_for(scripted))
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert [r["label"] for r in metrics["runs"]] == [
        "single-paper",
        "single-robust",
        "cot-paper",
        "cot-robust",
    ]
    assert metrics["configs"]["cot-robust"]["temperature"] == 0.2
    assert ("single-robust", "cot-robust") in [(c["a"], c["b"]) for c in metrics["comparisons"]]
    assert "single-robust" in result.output and "95% CI" in result.output
    assert (out / "plots" / "accuracy_vs_tokens.png").exists()
    # Rebuilding the report needs neither the LLM nor the dataset.
    rebuilt = runner.invoke(app, ["eval", "--out", str(out), "--report-only", "--no-plots"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "cot-paper" in (out / "report.md").read_text()
    again = json.loads((out / "metrics.json").read_text())
    assert ("single-robust", "cot-robust") in [(c["a"], c["b"]) for c in again["comparisons"]]


def test_cli_bad_line_fatal_or_reported(scripted: ScriptedLLM, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "bad.jsonl", [QUESTIONS[0], '{"question": "x"', QUESTIONS[1]])
    fatal = runner.invoke(
        app,
        [
            "eval",
            "--dataset",
            str(data),
            "--out",
            str(tmp_path / "o1"),
            "--protocols",
            "single",
            "--on-error",
            "fail",
            "--no-progress",
        ],
        env=env_for(scripted),
    )
    assert fatal.exit_code == 2 and "line 2" in fatal.output and "invalid JSON" in fatal.output
    assert scripted.requests == []
    skipped = runner.invoke(
        app,
        [
            "eval",
            "--dataset",
            str(data),
            "--out",
            str(tmp_path / "o2"),
            "--protocols",
            "single",
            "--no-progress",
            "--no-plots",
        ],
        env=env_for(scripted),
    )
    assert skipped.exit_code == 0, skipped.output
    assert "line 2" in skipped.output and "skipped" in skipped.output
    assert "dataset line 2: invalid JSON" in (tmp_path / "o2" / "report.md").read_text()


def test_cli_rejects_unknown_protocol_and_bad_compare(nq_dataset: Path, tmp_path: Path) -> None:
    bad = runner.invoke(
        app,
        [
            "eval",
            "--dataset",
            str(nq_dataset),
            "--out",
            str(tmp_path / "x"),
            "--protocols",
            "single,bogus",
            "--no-progress",
        ],
    )
    assert bad.exit_code == 2 and "bogus" in bad.output
    pair = runner.invoke(
        app,
        [
            "eval",
            "--dataset",
            str(nq_dataset),
            "--out",
            str(tmp_path / "x"),
            "--protocols",
            "single",
            "--compare",
            "single",
        ],
    )
    assert pair.exit_code == 2 and "A:B" in pair.output


def test_cli_via_api(scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path) -> None:
    with ContractGateway(scripted.base_url) as gateway:
        result = runner.invoke(
            app,
            [
                "eval",
                "--dataset",
                str(nq_dataset),
                "--out",
                str(tmp_path / "api"),
                "--protocols",
                "single",
                "--api",
                gateway.url,
                "--no-progress",
                "--no-plots",
            ],
            env={"PARLEY_EVAL_API_KEY": KEY, "PARLEY_EVAL_API_POLL_INTERVAL_S": "0.05"},
        )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "api" / "metrics.json").read_text())["runs"][0]["ok"] == 4


def test_sigterm_stops_cleanly_and_the_run_resumes(nq_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "term"
    args = [
        sys.executable,
        "-m",
        "parley_cli",
        "eval",
        "--dataset",
        str(nq_dataset),
        "--out",
        str(out),
    ]
    args += ["--protocols", "single", "--no-progress", "--no-plots"]
    with ScriptedLLM(latency_s=0.5) as slow:
        slow.on("Question", "[July 20, 1969]")
        proc = subprocess.Popen(
            args,
            env={**os.environ, **env_for(slow)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        results = out / "results" / "single.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (results.exists() and results.read_text().strip()):
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    done = [json.loads(x) for x in results.read_text().splitlines() if x.strip()]
    assert 1 <= len(done) < len(QUESTIONS)
    assert all(r["status"] == "ok" for r in done)  # nothing half-written
    # the stopped invocation still logged its time and what it finished (questions per hour)
    (logged,) = [json.loads(x) for x in (out / "invocations.jsonl").read_text().splitlines()]
    assert logged["run"] == "single" and logged["ok"] == len(done) and logged["wall_s"] > 0


def test_cli_refuses_a_bad_setting_without_a_traceback(nq_dataset: Path, tmp_path: Path) -> None:
    """An operator's PARLEY_… value the settings refuse ends with its name and exit 2, not a traceback."""
    result = runner.invoke(
        app,
        ["eval", "--dataset", str(nq_dataset), "--out", str(tmp_path / "out"), "--protocols", "single"],
        env={"PARLEY_LLM_EMBEDDED_SERVER": "native", "HF_HUB_OFFLINE": "1", "PARLEY_LLM_BASE_URL": ""},
    )
    assert result.exit_code == 2, result.output
    assert "invalid setting" in result.output
    assert "embedded_server" in result.output
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_config_takes_a_long_inline_object_a_file_or_says_what_is_wrong(tmp_path: Path) -> None:
    """An inline object longer than a file name may be (a run's whole configuration) is JSON, not a path."""
    import typer

    from evaluation.cli_args import parse_config

    whole = {"agents": 2, "judge": "auto", "mallm": {"decision": "majority"}, "note": "x" * 400}
    assert parse_config(json.dumps(whole), ["k_wiki=10"]) == {**whole, "k_wiki": 10}
    # a dotted key sets one field of a protocol's settings and keeps the others
    assert parse_config('{"mallm": {"paradigm": "relay"}}', ["mallm.decision=majority", "mallm.turns=3"]) == {
        "mallm": {"paradigm": "relay", "decision": "majority", "turns": 3}
    }
    assert parse_config(None, ["mad.tit_for_tat=3"]) == {"mad": {"tit_for_tat": 3}}
    for bad_set in ("mallm.=x", ".x=1", "=1"):
        with pytest.raises(typer.BadParameter, match="not key=value"):
            parse_config(None, [bad_set])
    with pytest.raises(typer.BadParameter, match="rounds is 2, not an object"):
        parse_config(None, ["rounds=2", "rounds.x=1"])
    saved = tmp_path / "config.json"
    saved.write_text(json.dumps({"rounds": 2}), encoding="utf-8")
    assert parse_config(str(saved), None) == {"rounds": 2}
    for bad, says in (
        (str(tmp_path / "missing.json"), "No such file"),
        ("x" * 400, "File name too long"),
        ('{"agents": 2', "not a JSON file or JSON object"),
        ("[1, 2]", "must be a JSON object"),
    ):
        with pytest.raises(typer.BadParameter, match=says):
            parse_config(bad, None)

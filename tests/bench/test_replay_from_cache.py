"""``bench.replay_from_cache``: a finished run replayed from the call cache makes no model call and
gives the same results; a cache that lacks the calls is reported, not hidden."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.replay_from_cache import main
from parley_cli import build_app
from tests.evaluation.conftest import QUESTIONS, scripted_reply, write_jsonl
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

# A packaged model's name: the cache keys it by its weights' sha256, not by the server's address, so
# the replay's (failing) server is another address and still hits.
MODEL = "qwen2.5-coder-0.5b"


def test_a_run_replays_with_no_call_and_the_same_results(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    source, cache = tmp_path / "source", tmp_path / "calls.sqlite"
    with ScriptedLLM(model=MODEL) as llm:
        llm.on(lambda body: True, scripted_reply)
        env = {
            "PARLEY_LLM_BASE_URL": llm.base_url,
            "PARLEY_LLM_MODEL": MODEL,
            "PARLEY_EVAL_CACHE_PATH": str(cache),
        }
        args = ["eval", "--dataset", str(dataset), "--out", str(source), "--protocols", "self_consistency"]
        ran = CliRunner().invoke(
            build_app(), [*args, "--set", "samples=3", "--no-progress", "--no-plots"], env=env
        )
        assert ran.exit_code == 0, ran.output
        called = len(llm.requests)
    assert called == 3 * len(QUESTIONS)

    out = tmp_path / "bench"
    assert (
        main(
            ["--source", str(source), "--label", "self_consistency", "--cache", str(cache), "--out", str(out)]
        )
        == 0
    )
    result = json.loads((out / "bench.json").read_text())
    assert result["model_calls_reaching_the_server"] == 0
    assert result["identical_results"] == result["identical_transcripts"] == len(QUESTIONS)
    assert result["replayed_calls"] == result["calls"] == called

    # Another cache: every call misses, each question fails, and the bench says so.
    assert (
        main(
            [
                "--source",
                str(source),
                "--label",
                "self_consistency",
                "--cache",
                str(tmp_path / "empty.sqlite"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    empty = json.loads((out / "bench.json").read_text())
    assert empty["model_calls_reaching_the_server"] == 0 and empty["finished"] == 0
    assert empty["identical_results"] == 0


def test_a_study_replays_whole(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    study, cache = tmp_path / "study.toml", tmp_path / "calls.sqlite"
    study.write_text(
        '[study]\nname = "s"\nout = "out"\nbaseline = "single"\nbootstrap_samples = 200\n\n'
        '[[datasets]]\nname = "nq"\npath = "nq.jsonl"\n\n[grid]\ntemperature = [0.2, 0.7]\n\n'
        '[[runs]]\nprotocols = ["single", "cot"]\n'
    )
    with ScriptedLLM(model=MODEL) as llm:
        llm.on(lambda body: True, scripted_reply)
        env = {
            "PARLEY_LLM_BASE_URL": llm.base_url,
            "PARLEY_LLM_MODEL": MODEL,
            "PARLEY_EVAL_CACHE_PATH": str(cache),
        }
        ran = CliRunner().invoke(build_app(), ["eval", "--experiment", str(study), "--no-progress"], env=env)
        assert ran.exit_code == 0, ran.output
        called = len(llm.requests)

    out = tmp_path / "bench"
    assert main(["--experiment", str(study), "--cache", str(cache), "--out", str(out)]) == 0
    result = json.loads((out / "bench.json").read_text())
    assert result["model_calls_reaching_the_server"] == 0 and result["same_study_accuracies"]
    assert result["questions"] == result["identical_results"] == 2 * 2 * len(QUESTIONS)
    assert result["replayed_calls"] == called

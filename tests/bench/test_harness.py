"""The benchmark harness's own pieces: statistics, report facts, /proc readings, process start and stop,
question files and answer-in-pool scoring, and a batch driven through a real gateway."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.harness.batches import job_times, run_batch
from bench.harness.cli import add_llm_bench_args, study_parser
from bench.harness.plots import curves
from bench.harness.processes import service_env, start_process, wait_http
from bench.harness.procfs import descendants, group_cpu_s, machine_busy, memory_mib
from bench.harness.questions import load_questions
from bench.harness.reports import command_line, table_head, utc_iso, write_json, write_markdown
from bench.harness.retrieval import has_answer, questions_file, run_facts
from bench.harness.stack import GatewayStack
from bench.harness.stats import call_costs, ci_summary, percentile, upper_percentile_ms
from evaluation.metrics import paired_bootstrap
from parley_testing.processes import WorkerProcess, redis_binary, worker_env
from services.processes import stop_process
from tests.support.scripted_llm import ScriptedLLM


@pytest.mark.unit
def test_percentiles_pick_the_sample_their_rule_names() -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 95) == 5.0  # round(0.95 * 4) = 4: the largest
    assert percentile(xs, 0) == 1.0
    assert math.isnan(percentile([], 50))
    # The soak's windows count the slow tail from rank floor(n * p / 100), in ms.
    assert upper_percentile_ms([0.001 * i for i in range(1, 101)], 99) == 100.0
    assert upper_percentile_ms([0.002, 0.001], 50) == 2.0
    assert upper_percentile_ms([], 50) is None


@pytest.mark.unit
def test_call_costs_and_ci_summary_are_what_the_reports_hold() -> None:
    calls = [
        {"prompt_tokens": 10, "completion_tokens": 2, "seconds": 1.0},
        {"prompt_tokens": 20, "completion_tokens": 4, "seconds": 3.0},
    ]
    # p50 of two samples: rank round(0.5) = 0 (round half to even), the faster call.
    assert call_costs(calls) == {
        "prompt_tokens": 15.0,
        "completion_tokens": 3.0,
        "seconds_p50": 1.0,
        "seconds_p95": 3.0,
    }
    summary = ci_summary(paired_bootstrap([0.0] * 20, [1.0] * 20))
    assert summary["diff"] == 1.0 and summary["excludes_0"] is True
    assert set(summary) == {"diff", "low", "high", "excludes_0"}


@pytest.mark.unit
def test_report_facts_and_files(tmp_path: Path) -> None:
    assert command_line("bench.x", ["--a", "1"]) == "python -m bench.x --a 1"
    assert command_line("bench.x", [], env="HF_HUB_OFFLINE=1") == "HF_HUB_OFFLINE=1 python -m bench.x"
    assert utc_iso(0) == "1970-01-01T00:00:00+00:00"
    assert table_head("a", "b") == ["| a | b |", "|---|---|"]
    write_json(tmp_path / "deep" / "r.json", {"k": 1})
    assert json.loads((tmp_path / "deep" / "r.json").read_text()) == {"k": 1}
    text = write_markdown(tmp_path / "r.md", ["# T", "", "x"])
    assert text == "# T\n\nx\n" == (tmp_path / "r.md").read_text()


@pytest.mark.unit
def test_question_files_are_checked_and_split(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    rows = [{"id": str(i), "question": f"Q{i}?", "answers": [f"a{i}"]} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [q["id"] for q in load_questions(path, "odd")] == ["1", "3"]
    assert [q["id"] for q in load_questions(path, "even", 2)] == ["0", "2"]
    path.write_text('{"question": "no answers"}\n')
    with pytest.raises(SystemExit, match=r"q\.jsonl:1"):
        load_questions(path)
    assert has_answer(["The capital is Paris."], ["paris"])
    assert not has_answer(["Parisian cafés"], ["paris"])


@pytest.mark.unit
def test_llm_bench_options_and_run_facts(tmp_path: Path) -> None:
    ap = study_parser("doc")
    add_llm_bench_args(ap, tmp_path / "out")
    args = ap.parse_args(["--questions", "data/q.jsonl", "--split", "odd", "--llm-url", "http://x/v1"])
    assert args.out == tmp_path / "out" and args.limit is None
    assert questions_file(args) == "q.jsonl (odd half)"
    facts = run_facts("bench.study", ["--limit", "3"], args)
    assert facts["command"] == "HF_HUB_OFFLINE=1 python -m bench.study --limit 3"
    assert facts["llm_url"] == "http://x/v1" and "CPUs" in facts["machine"]
    assert isinstance(args, argparse.Namespace)


@pytest.mark.unit
def test_curves_draw_a_png(tmp_path: Path) -> None:
    path = curves(
        tmp_path / "c.png", [1, 5, 10], {"a": [0.1, 0.2, 0.3]}, xlabel="k", ylabel="y", title="t", log_x=True
    )
    assert path.stat().st_size > 1000


@pytest.mark.integration  # starts a child process
def test_proc_readings_of_this_process_and_its_child(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert {os.getpid(), child.pid} <= descendants(os.getpid())
        mem = memory_mib()
        assert 0 < mem["RssAnon"] <= mem["VmRSS"] <= mem["VmHWM"]
        assert group_cpu_s(child.pid) >= 0.0  # the child leads its own group
        busy, total = machine_busy()
        assert 0 < busy <= total
    finally:
        stop_process(child, 5)
    assert child.returncode is not None


@pytest.mark.integration  # starts processes
def test_a_process_that_ignores_sigterm_is_killed_and_one_that_exits_fails_the_wait(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    stubborn = start_process(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('up', flush=True); time.sleep(60)"], service_env(), log,
    )  # fmt: skip
    while b"up" not in log.read_bytes():
        time.sleep(0.05)
    started = time.monotonic()
    stop_process(stubborn, 1, group=True)
    assert stubborn.returncode == -9 and time.monotonic() - started < 10
    dead = start_process([sys.executable, "-c", "print('bye')"], service_env(), tmp_path / "d.log")
    with pytest.raises(RuntimeError, match="exited"):
        wait_http("http://127.0.0.1:9/none", 30, proc=dead, log=tmp_path / "d.log")


@pytest.mark.unit
def test_the_service_env_drops_every_parley_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_API_KEYS", "{}")
    env = service_env()
    assert not [k for k in env if k.startswith("PARLEY_")]
    assert env["HF_HUB_OFFLINE"] == "1" and Path(env["PYTHONPATH"], "bench").is_dir()


@pytest.mark.integration
@pytest.mark.skipif(redis_binary() is None, reason="redis-server not installed")
def test_a_batch_through_the_gateway_stack_ends_with_its_job_times(tmp_path: Path) -> None:
    stack = GatewayStack(tmp_path)
    try:
        stack.start({"PARLEY_API_METRICS_PORT": "0"})
        with (
            ScriptedLLM(latency_s=0.01, default_reply="The answer is [one].") as llm,
            WorkerProcess(worker_env(stack.redis.url, llm.base_url), tmp_path / "w.log", concurrency=2),
        ):
            llm.on("[Yes]", "They agree. [Yes]")
            items = [{"id": f"i{n}", "question": f"Question {n}?"} for n in range(3)]
            t0, rows = run_batch(stack.api_url, items, {"knowledge": "none", "rounds": 2}, poll_s=0.1)
            finished = job_times(stack.redis, rows)
    finally:
        stack.stop()
    assert [r["status"] for r in rows] == ["completed"] * 3
    assert all(t0 < t < time.time() for t in finished)
    assert stack.gateway is not None and stack.gateway.proc.poll() is not None

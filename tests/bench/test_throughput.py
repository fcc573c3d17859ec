"""The batch-throughput benchmark on a tiny batch: real redis, gateway and worker; a scripted LLM (the
harness, fast) and, marked ``llm``, the real embedded 0.5B server (the one the command starts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.throughput import Setting, load_items, main, parse_settings
from parley_testing.processes import redis_binary
from tests.support.scripted_llm import ScriptedLLM

needs_redis = pytest.mark.skipif(redis_binary() is None, reason="redis-server not installed")


@pytest.mark.unit
def test_settings_and_items() -> None:
    assert parse_settings("2x4,4x16") == [Setting(2, 4), Setting(4, 16)]
    # W processes x calls each fill about S slots; never fewer than a MADKE round's two debaters.
    assert [s.per_process for s in parse_settings("1x4,2x4,2x8,4x8,8x8")] == [4, 2, 4, 2, 2]
    items = load_items(Path("data/nq_open_vital_dev.jsonl"), Path("reports/nq100-0.5b/pools.jsonl"), 3)
    assert len(items) == 3 and all(it["answers"] and it["pool"] for it in items)
    assert set(items[0]["pool"][0]) <= {"source", "title", "text", "url", "score"}


@pytest.mark.integration
@needs_redis
def test_a_tiny_batch_through_the_service_with_a_scripted_llm(tmp_path: Path) -> None:
    with ScriptedLLM(latency_s=0.05, default_reply="The answer is [one].") as llm:
        llm.on("[Yes]", "They agree. [Yes]")
        report = main(
            ["--questions", "3", "--settings", "1x2,2x4", "--llm-url", llm.base_url,
             "--config", json.dumps({"knowledge": "none", "rounds": 2}), "--structured-output", "off",
             "--pools", str(tmp_path / "no-pools.jsonl"),
             "--out", str(tmp_path)]
        )  # fmt: skip
    rows = report["rows"]
    assert [r["setting"] for r in rows] == ["1x2", "2x4"]
    assert all(r["completed"] == 3 and r["questions_per_hour"] > 0 for r in rows)
    # The first question's gold answer is "one": every setting answers it the same way.
    assert all(r["accuracy_contains"] == pytest.approx(1 / 3, abs=1e-3) for r in rows)
    assert rows[1]["accuracy_diff_vs_first"]["diff"] == 0.0
    assert rows[0]["speedup_vs_first"] == 1.0
    assert "| external | 2x4 | 2 | 3/3 |" in (tmp_path / "throughput.md").read_text()
    assert (tmp_path / "throughput.png").stat().st_size > 1000


def test_labelled_servers_run_side_by_side_each_getting_its_own_calls(tmp_path: Path) -> None:
    with (
        ScriptedLLM(latency_s=0.02, default_reply="The answer is [one].") as fast,
        ScriptedLLM(latency_s=0.3, default_reply="The answer is [one].") as slow,
    ):
        for llm in (fast, slow):
            llm.on("[Yes]", "They agree. [Yes]")
        report = main(
            ["--questions", "2", "--settings", "1x2", "--llm-url",
             f"compiled={fast.base_url},prebuilt={slow.base_url}",
             "--config", json.dumps({"knowledge": "none", "rounds": 2}), "--structured-output", "off",
             "--pools", str(tmp_path / "no-pools.jsonl"), "--out", str(tmp_path)]
        )  # fmt: skip
        served = (fast.served, slow.served)
    rows = report["rows"]
    assert [r["server"] for r in rows] == ["compiled", "prebuilt"]
    assert all(r["completed"] == 2 for r in rows)
    # Each label's batch went to its own server, the same number of calls each.
    assert served[0] == served[1] > 0
    assert rows[1]["questions_per_hour"] < rows[0]["questions_per_hour"]
    assert rows[1]["speedup_vs_first"] < 1.0
    # A server started elsewhere: its CPU is not measured, and the table says so.
    assert rows[0]["server_cores"] is None
    # Each server's prompt rate on its own is measured before its batch and reported beside it.
    assert all(r["isolated_prompt_tokens_per_s"] > 0 for r in rows)
    assert "| compiled | 1x2 | 2 | 2/2 |" in (tmp_path / "throughput.md").read_text()


@pytest.mark.integration
@needs_redis
def test_a_resumed_run_keeps_the_measured_settings_and_runs_only_the_others(tmp_path: Path) -> None:
    common = ["--questions", "2", "--config", json.dumps({"knowledge": "none", "rounds": 2}),
              "--structured-output", "off", "--pools", str(tmp_path / "no-pools.jsonl"),
              "--out", str(tmp_path)]  # fmt: skip
    with ScriptedLLM(latency_s=0.02, default_reply="The answer is [one].") as llm:
        llm.on("[Yes]", "They agree. [Yes]")
        first = main(["--settings", "1x2", "--llm-url", llm.base_url, *common])
        calls_first = llm.served
        # The report is on disk after each setting: a run stopped later keeps this row.
        on_disk = json.loads((tmp_path / "throughput.json").read_text())
        assert [r["setting"] for r in on_disk["rows"]] == ["1x2"]
        resumed = main(["--settings", "1x2,2x4", "--llm-url", llm.base_url, "--resume", *common])
        calls_resumed = llm.served - calls_first
    kept, new = resumed["rows"]
    assert kept["measured_at"] == first["rows"][0]["measured_at"]
    assert kept["wall_s"] == first["rows"][0]["wall_s"]
    assert new["setting"] == "2x4" and new["completed"] == 2
    # Only the new setting reached the server: as many calls as the first run's one setting.
    assert calls_resumed == calls_first
    text = (tmp_path / "throughput.md").read_text()
    assert "Kept from an earlier run (`--resume`): external 1x2." in text
    # A report of another batch is not mixed in: refused before anything runs.
    other = [*common[:2], "1", *common[2:]]
    with pytest.raises(SystemExit) as exc:
        main(["--settings", "1x2,4x8", "--llm-url", "http://127.0.0.1:9/v1", "--resume", *other])
    assert exc.value.code == 2
    assert [r["setting"] for r in json.loads((tmp_path / "throughput.json").read_text())["rows"]] == [
        "1x2",
        "2x4",
    ]


@pytest.mark.parametrize(
    "spec", ["compiled=http://a/v1,compiled=http://b/v1", "compiled=ftp://x", "=http://a/v1,b"]
)
def test_a_bad_list_of_servers_is_refused_before_anything_runs(spec: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--llm-url", spec, "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert not (tmp_path / "throughput.json").exists()


@pytest.mark.llm
@needs_redis
def test_a_tiny_batch_on_the_embedded_model(tmp_path: Path) -> None:
    report = main(
        ["--questions", "2", "--settings", "1x2", "--servers", "xllamacpp", "--model", "qwen2.5-coder-0.5b",
         "--config", json.dumps({"protocol": "rag", "prompt_style": "robust"}), "--out", str(tmp_path)]
    )  # fmt: skip
    (row,) = report["rows"]
    assert row["completed"] == 2 and row["prompt_tokens_per_s"] > 0 and row["server_cores"] > 0

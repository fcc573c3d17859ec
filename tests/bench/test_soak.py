"""The soak, short: three minutes of load with one fault of each kind, overlapping, on real processes
(redis-server with AOF, the gateway, two Celery workers, the retriever, the scripted LLM), with finished
jobs kept one minute (``PARLEY_JOB_TTL_S``): most expire during the run, and every job's account must
still come out exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.soak import FAULTS, main
from parley_testing.processes import redis_binary

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(redis_binary() is None, reason="redis-server not installed"),
]


def test_three_minutes_with_every_fault_loses_nothing_and_charges_what_was_served(tmp_path: Path) -> None:
    report = main(
        [
            "--minutes", "3", "--fault-every", "20", "--warmup", "10", "--window-minutes", "1",
            "--burst-s", "8", "--drain", "240", "--job-ttl-s", "60", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    jobs = report["jobs"]
    # Every job is charged exactly what was served for it (a call that timed out too, when the server
    # answered within the client's grace), but those with a call the server answered only after the
    # client had cut it, or cut by a killed worker, which keep that call's worst case.
    assert report["jobs_charged_not_served"] == 0, report["jobs_charged_not_served_list"]
    # Every kind of fault was injected and recovered from.
    assert {f["kind"] for f in report["faults"]} == set(FAULTS), report["faults"]
    assert report["faults_not_recovered"] == [], report["faults_not_recovered"]
    # Nothing lost, nothing run twice, every job ended; failures only with a reason (the LLM faults).
    assert jobs["submitted"] > 50
    assert jobs["lost"] == 0, jobs["not_terminal"]
    assert jobs["run_twice"] == 0, jobs["run_twice_tags"]
    assert jobs["completed"] > jobs["submitted"] / 2
    assert all("LLM error" in reason for reason in jobs["failed_reasons"]), jobs["failed_reasons"]
    assert jobs["cancelled"] >= 1  # the client that disconnected from its stream
    # No key keeps a reservation once its jobs have ended, and each key's total is what was served
    # for it plus, exactly, the worst cases its cut calls keep (jobs listed apart above).
    for key, tokens in report["tokens"].items():
        assert tokens["reserved_left"] == 0, (key, tokens)
        worst_cases = tokens["charged_worst_case_for_cut_calls"]
        assert tokens["charged"] - tokens["served"] == worst_cases, (key, tokens)
    saved = json.loads((tmp_path / "soak.json").read_text())
    assert saved["jobs"] == jobs and saved["job_ttl_s"] == 60
    md = (tmp_path / "soak.md").read_text()
    assert "| worker_kill |" in md and "`PARLEY_JOB_TTL_S`, gateway and workers): 60 s" in md
    # Finished jobs expired while the load went on: from two minutes on (one retention and the
    # events' minute of grace) Redis stays level, where keeping every job grew it by a third a minute.
    redis_mb = [w["redis_used_mb"] for w in report["windows"]]
    assert redis_mb[-1] <= redis_mb[1] * 1.25, redis_mb
    assert (tmp_path / "soak.png").stat().st_size > 1000

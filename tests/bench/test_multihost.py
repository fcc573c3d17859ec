"""Workers on several hosts, short: every fault of the multi-host harness once, with short cuts, on real
processes in network namespaces (Redis with a password, the gateway, the retriever, the scripted LLM,
two worker hosts), and the invariants: every job ends, none lost, none run twice, each charged what was
served for it, a retried submit names one job, a client meets 503 with ``Retry-After`` (never a hang
or a 500) while the gateway cannot reach Redis, and a stream resumed with ``Last-Event-ID`` is whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.multihost import FAULTS, TARGET_RECOVERY_S, main
from bench.multihost_faults import HANG_S
from bench.multihost_net import available
from parley_testing.processes import redis_binary

WHY_NOT = available() if redis_binary() is not None else "redis-server not installed"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(WHY_NOT is not None, reason=f"multi-host harness: {WHY_NOT}"),
]


def test_every_partition_and_slow_link_once_loses_nothing(tmp_path: Path) -> None:
    report = main(
        [
            "--repeats", "1", "--redis-cut-s", "12", "--cut-s", "12", "--gateway-cut-s", "20",
            "--delay-s", "0.5", "--drop", "0.05", "--drain", "150", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    faults = {f["kind"]: f for f in report["faults"]}
    assert set(faults) == set(FAULTS)
    assert_invariants(report)
    # The cut worker was running debates when its link went.
    for kind in ("worker_redis", "worker_llm", "worker_retriever"):
        assert faults[kind]["running_at_cut"] >= 1, (kind, faults[kind])
    # The report: JSON, the table and the plot.
    saved = json.loads((tmp_path / "multihost.json").read_text())
    assert saved["totals"] == report["totals"] and saved["totals"]["lost"] == 0
    md = (tmp_path / "multihost.md").read_text()
    assert "| gateway_redis | 1 |" in md and "| worker_redis | 1 | 12.0 |" in md
    assert (tmp_path / "recovery.png").stat().st_size > 1000


def test_over_tls_with_the_url_in_a_secret_file_the_same_holds(tmp_path: Path) -> None:
    """Redis over TLS only (rediss://, its certificate checked), the URL with its password given to the
    gateway and the workers as a secret file: the cuts that touch Redis lose nothing either, and no
    service process shows the password in its environment or command line."""
    report = main(
        [
            "--repeats", "1", "--secured", "--faults", "worker_redis,gateway_redis", "--redis-cut-s", "10",
            "--gateway-cut-s", "20", "--drain", "150", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert {f["kind"] for f in report["faults"]} == {"worker_redis", "gateway_redis"}
    assert report["redis"].startswith("rediss://")
    assert report["redis_password_shown_by"] == []
    assert_invariants(report)


def assert_invariants(report: dict[str, Any]) -> None:
    """Every job ended, none lost or run twice, each charged what was served, retried submits named
    one job; while the gateway could not reach Redis a client met 503 + Retry-After, promptly, and the
    stream it followed came out whole."""
    faults = {f["kind"]: f for f in report["faults"]}
    for kind, f in faults.items():
        jobs = f["jobs"]
        assert jobs["submitted"] >= 5, (kind, jobs)
        assert jobs["lost"] == 0, (kind, jobs["not_terminal"])
        assert jobs["run_twice"] == 0, (kind, jobs["run_twice_tags"])
        # Every job ended, and a new debate completed, within the target after the heal.
        assert f["recovery_s"] is not None and f["recovery_s"] < TARGET_RECOVERY_S, (kind, f)
        # A retried submit (same Idempotency-Key) names one job, however often it was retried.
        assert f["submissions"]["keys_naming_two_jobs"] == [], (kind, f["submissions"])
        assert f["submissions"]["accepted"] == f["submissions"]["debates"], (kind, f["submissions"])
        # Failures only with a reason.
        assert all(reason and reason != "no reason given" for reason in jobs["failed_reasons"]), jobs
        assert "500" not in f["submissions"]["answers_by_status"], (kind, f["submissions"])
    # Each job charged what the LLM served for it (a call a cut left without its answer keeps its worst
    # case: listed apart), and each key in total.
    assert report["jobs_charged_not_served"] == 0, report["jobs_charged_not_served_list"]
    for key, tokens in report["tokens"].items():
        assert tokens["reserved_left"] == 0, (key, tokens)
        assert tokens["charged"] - tokens["served"] == tokens["charged_worst_case_for_cut_calls"], (
            key,
            tokens,
        )
    # The gateway cut from Redis: every answer a 503 with Retry-After, promptly; none a 500 or a hang.
    cut = faults["gateway_redis"]
    answers = [a for rows in cut["client_view"].values() for a in rows]
    assert {"submit", "status", "new stream"} <= set(cut["client_view"]), cut["client_view"]
    assert answers and all(a.get("status") == 503 for a in answers), answers
    assert all(a["retry_after"] and a["s"] < HANG_S for a in answers), answers
    assert cut["submissions"]["answers_by_status"].get("503", 0) >= 1, cut["submissions"]
    assert not any(k.startswith("HTTP 5") and k != "HTTP 503" for k in report["gateway_errors"]), report
    # The stream open across the cut ended cleanly, was resumed with Last-Event-ID, and what the
    # client pieced together is the whole stream, nothing twice.
    stream = cut["stream"]
    assert stream["connections"] >= 2 and stream["broken"] == 0, stream
    assert stream["terminal"] and stream["same_as_full_replay"] and stream["duplicates"] == 0, stream
    assert cut["gateway_cut_ok"] is True

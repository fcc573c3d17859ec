"""The scaling benchmark on a tiny run: real redis, gateway, worker nodes and scripted replicas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scaling import main
from parley_testing.processes import redis_binary

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(redis_binary() is None, reason="redis-server not installed"),
]


def test_a_tiny_scaling_run_writes_its_report(tmp_path: Path) -> None:
    report = main(
        [
            "--series",
            "both",
            "--ks",
            "1,2",
            "--items-per-unit",
            "3",
            "--latency",
            "0.05",
            "--out",
            str(tmp_path),
        ]
    )
    points = report["points"]
    assert [p["k"] for p in points] == [1, 2]
    assert all(p["completed"] == p["items"] for p in points)
    # Two replicas: the worker nodes' calls reached both, and every call was answered once.
    two = points[1]["replica_calls"]
    assert len(two) == 2 and all(v > 0 for v in two.values())
    assert sum(two.values()) == points[1]["calls_per_debate"] * points[1]["completed"]
    assert points[0]["efficiency"] == 1.0 and points[1]["efficiency"] > 0
    # The replicas' own request times account for the wall: every call seen, shares within 0..1.
    load = points[1]["replica_load"]
    assert len(load["busy"]) == 2 and all(0 < b <= 1 for b in load["busy"])
    assert 0 <= load["misplaced"] + load["starved"] <= 1
    assert sum(load["debates_started"]) == points[1]["completed"]
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert saved["points"] == points
    assert "| both (k=2) |" in (tmp_path / "scaling.md").read_text()
    assert (tmp_path / "scaling.png").stat().st_size > 1000

"""bench.call_cache measures misses then hits through a real store and reports both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.call_cache import main

pytestmark = pytest.mark.unit


def test_the_bench_times_misses_and_hits(tmp_path: Path) -> None:
    result = main(["--calls", "20", "--out", str(tmp_path)])
    assert result["calls"] == 20 and result["bytes_per_call"] > 0
    assert set(result) >= {"miss", "hit"} and result["hit"]["p95_ms"] >= result["hit"]["p50_ms"] > 0
    written = json.loads((tmp_path / "bench.json").read_text())
    assert written["miss"] == result["miss"]
    assert "| hit |" in (tmp_path / "bench.md").read_text()

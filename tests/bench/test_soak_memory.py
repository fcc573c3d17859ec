"""The soak's memory readings: all of a process's resident memory and its anonymous part, and the
largest move after the first window for each."""

from __future__ import annotations

import os

from bench.harness.procfs import memory_mb
from bench.soak_checks import drift


def test_anonymous_memory_is_read_and_is_part_of_the_resident_set() -> None:
    total, anon = memory_mb(os.getpid(), tree=False)
    assert 0 < anon <= total
    # the tree of a process without children is the process itself
    assert memory_mb(os.getpid())[1] > 0


def test_drift_is_measured_on_either_reading() -> None:
    windows = [
        {"rss_mb": {"retriever": 900.0}, "anon_mb": {"retriever": 600.0}, "redis_used_mb": 20.0},
        {"rss_mb": {"retriever": 990.0}, "anon_mb": {"retriever": 606.0}, "redis_used_mb": 21.0},
    ]
    assert drift(windows) == {"retriever": 10.0, "redis_used_mb": 5.0}
    assert drift(windows, "anon_mb") == {"retriever": 1.0}

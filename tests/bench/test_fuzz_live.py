"""The fuzz run's summary: what docs/fuzzing.md quotes is read from schemathesis's own output."""

from __future__ import annotations

from bench.fuzz_live import summarize

CLEAN = """
API Operations:
  Selected: 14/14
  Tested: 14

Test cases:
  5569 generated, 5569 passed, 26 skipped

========================== No issues found in 73.65s ===========================
"""

FAILING = """
API Operations:
  Selected: 14/14
  Tested: 13
  Errored: 1

Test cases:
  812 generated, 805 passed, 7 failed, 3 skipped

=================================== 7 failures in 12.30s ===================================
"""


def test_a_clean_run_reads_as_no_failures() -> None:
    summary = summarize(CLEAN)
    assert summary == {
        "operations": 14,
        "cases": {"generated": 5569, "passed": 5569, "failed": 0, "skipped": 26},
        "no_issues": True,
        "seconds": 73.65,
    }


def test_failures_are_counted_and_not_called_clean() -> None:
    summary = summarize(FAILING)
    assert summary["cases"] == {"generated": 812, "passed": 805, "failed": 7, "skipped": 3}
    assert summary["no_issues"] is False
    assert summary["operations"] == 13
    assert summary["seconds"] == 12.3


def test_output_without_a_summary_reads_as_nothing_tested() -> None:
    summary = summarize("st: error: no such file\n")
    assert summary["cases"]["generated"] == 0 and summary["operations"] == 0
    assert summary["no_issues"] is False and summary["seconds"] is None

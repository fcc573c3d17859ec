"""Progress in a log file: plain lines at an interval with the rate and the time left."""

from __future__ import annotations

import io

import pytest

from evaluation.progress import LineProgress, duration, make_progress

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_at_the_interval_with_rate_failures_and_time_left() -> None:
    """A resumed run: 200 of 300 done before. Ten more in 500 s is 50 s a question (the earlier 200 do
    not count), so 90 left is 75 min."""
    clock, out = Clock(), io.StringIO()
    bar = LineProgress("madke", 300, 200, stream=out, interval_s=60, clock=clock)
    assert out.getvalue() == "madke: 200/300 done before, 100 to go\n"
    for _ in range(10):
        clock.now += 50
        bar.update(1)
        bar.set_postfix(failed=1, refresh=False)
    lines = out.getvalue().splitlines()[1:]
    # one line each time 60 s have passed since the last: after items 2, 4, 6, 8 and 10
    assert len(lines) == 5
    assert lines[-1] == "madke: 210/300 (70.0 %) · 1 failed · 50.0 s per question · about 1 h 15 min left"
    bar.close()
    bar.close()
    assert out.getvalue().splitlines()[-1].startswith("madke: 210/300")
    assert len(out.getvalue().splitlines()) == 7  # the closing line, once


def test_a_finished_run_and_one_with_nothing_to_do() -> None:
    clock, out = Clock(), io.StringIO()
    bar = LineProgress("rag", 2, 0, stream=out, interval_s=3600, clock=clock)
    clock.now += 10
    bar.update(2)
    bar.close()
    assert out.getvalue().splitlines()[-1] == "rag: 2/2 (100.0 %) · 5.0 s per question"
    quiet = io.StringIO()
    LineProgress("single", 5, 5, stream=quiet, clock=clock).close()
    assert quiet.getvalue() == ""  # nothing to do, nothing to say


def test_make_progress_writes_lines_to_a_file_and_nothing_when_disabled() -> None:
    out = io.StringIO()  # not a terminal
    assert isinstance(make_progress("cot", 10, 0, True, stream=out), LineProgress)
    silent = io.StringIO()
    bar = make_progress("cot", 10, 0, False, stream=silent)
    bar.update(10)
    bar.close()
    assert silent.getvalue() == ""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (89, "89 s"), (90, "2 min"), (3000, "50 min"), (3599, "1 h 00 min"), (3660, "1 h 01 min")],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text

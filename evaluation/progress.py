"""Progress of a long evaluation: a tqdm bar on a terminal, plain lines in a log file.

An evaluation of hundreds of questions runs for hours, often under ``nohup`` with its output sent to a
file. There a bar's carriage-return redraws pile up into one unreadable line, so when the stream is
not a terminal each run writes one line at most every ``interval_s`` seconds and one when it ends:
done/total, failures, seconds per question of throughput in this invocation, and the time left.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from tqdm import tqdm


class Progress(Protocol):
    """The part of tqdm's interface the evaluation uses."""

    def update(self, n: int = 1) -> Any: ...
    def set_postfix(self, *, refresh: bool = True, **values: Any) -> Any: ...
    def close(self) -> Any: ...


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``: time left, at the precision a person plans with."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class LineProgress:
    """Plain progress lines for a log: ``madke: 215/300 (71.7 %) · 2 failed · 55.8 s per question ·
    about 1 h 19 min left``. The rate counts only what this invocation finished, so a resumed run's
    earlier items do not make it look faster than it is."""

    def __init__(
        self,
        desc: str,
        total: int,
        initial: int = 0,
        *,
        stream: TextIO | None = None,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.desc, self.total, self.initial, self.n = desc, total, initial, initial
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self.clock = clock
        self.started = self.last = clock()
        self.postfix: dict[str, Any] = {}
        self.closed = False
        if initial < total:
            self._write(f"{desc}: {initial}/{total} done before, {total - initial} to go")

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self.last >= self.interval_s:
            self._write(self.line())

    def set_postfix(self, *, refresh: bool = True, **values: Any) -> None:
        self.postfix.update(values)

    def close(self) -> None:
        if not self.closed and self.n > self.initial:
            self._write(self.line())
        self.closed = True

    def line(self) -> str:
        share = 100 * self.n / self.total if self.total else 100.0
        parts = [f"{self.desc}: {self.n}/{self.total} ({share:.1f} %)"]
        failed = self.postfix.get("failed")
        if failed:
            parts.append(f"{failed} failed")
        done_here = self.n - self.initial
        if done_here > 0:
            per_item = (self.clock() - self.started) / done_here
            parts.append(f"{per_item:.1f} s per question")
            left = self.total - self.n
            if left > 0:
                parts.append(f"about {duration(per_item * left)} left")
        return " · ".join(parts)

    def _write(self, text: str) -> None:
        self.last = self.clock()
        print(text, file=self.stream, flush=True)


def make_progress(
    desc: str, total: int, initial: int, enabled: bool = True, *, stream: TextIO | None = None
) -> Progress:
    """One progress display per run; ``initial`` shows the items a resumed run already has. A tqdm bar
    on a terminal, plain lines otherwise (a log file), nothing when disabled."""
    out = stream if stream is not None else sys.stderr
    if enabled and not out.isatty():
        return LineProgress(desc, total, initial, stream=out)

    bar: Progress = tqdm(
        total=total, initial=initial, desc=desc, unit="q", disable=not enabled, dynamic_ncols=True, file=out
    )
    return bar

"""Keep Celery's worker running after an error it does not recover from by itself.

Celery's worker stops for good, logging "Unrecoverable error", when something other than a broker
connection error escapes its consumer: after Redis vanishes, a reconnect race in kombu can raise an
``AttributeError`` on the discarded connection (celery/kombu#582, celery#8030). The main process then
exits, or idles, while the queue keeps its messages. Under compose ``restart: unless-stopped`` would
start it again; run alone (systemd without ``Restart=``, a shell, a test) nothing would. So the worker
starts Celery's worker again in the same process, within a bounded budget, unless the stop was asked
for (SIGTERM, SIGINT, SIGQUIT: Celery announces those with ``worker_shutting_down``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from celery import signals
from celery.worker import state

log = logging.getLogger("parley.worker")


class CeleryApp(Protocol):
    def worker_main(self, argv: list[str] | None = None) -> None: ...


@dataclass
class RestartBudget:
    """At most ``limit`` restarts within any ``window_s`` seconds."""

    limit: int
    window_s: float
    clock: Callable[[], float] = time.monotonic
    _at: deque[float] = field(default_factory=deque)

    def take(self) -> bool:
        now = self.clock()
        while self._at and now - self._at[0] > self.window_s:
            self._at.popleft()
        if len(self._at) >= self.limit:
            return False
        self._at.append(now)
        return True


def run_until_stopped(
    start: Callable[[], int],
    budget: RestartBudget,
    *,
    delay_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    stop_requested: threading.Event,
) -> int:
    """Run Celery's worker (``start`` returns its exit code) until it stopped for a reason other
    than an unrecoverable error, or the budget of restarts is spent; return its last exit code."""
    while True:
        code = start()
        if code == 0 or stop_requested.is_set():
            return code
        if not budget.take():
            log.critical(
                "Celery's worker stopped (exit code %d) %d times within %.0f s; not restarting it",
                code,
                budget.limit,
                budget.window_s,
            )
            return code
        log.warning(
            "Celery's worker stopped on an unrecoverable error (exit code %d); starting it again in %.1f s",
            code,
            delay_s,
        )
        forget_stale_requests()
        sleep(delay_s)


def worker_starter(app: CeleryApp, argv: Sequence[str]) -> Callable[[], int]:
    """Starts ``celery worker argv`` and returns its exit code. Celery's ``worker_main`` drops the exit
    code, so it is read from the worker itself as it shuts down (``worker_shutdown``)."""
    exit_codes: list[int] = []

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        exit_codes.append(int(getattr(sender, "exitcode", 0) or 0))

    signals.worker_shutdown.connect(on_shutdown, weak=False)

    def start() -> int:
        exit_codes.clear()
        app.worker_main(list(argv))
        return exit_codes[-1] if exit_codes else 1  # stopped before it ran: not a clean stop

    return start


def watch_shutdown_requests() -> threading.Event:
    """An event set when Celery starts a shutdown it was asked for (a signal to the main process)."""
    requested = threading.Event()

    def on_shutting_down(**_: Any) -> None:
        requested.set()

    signals.worker_shutting_down.connect(on_shutting_down, weak=False)
    return requested


def forget_stale_requests() -> None:
    """Celery's per-process record of reserved and active requests belongs to the stopped worker: its
    unacknowledged messages come back from the broker (visibility timeout, or the sweep of lapsed
    jobs), so the next worker must not count them as its own."""
    state.reset_state()

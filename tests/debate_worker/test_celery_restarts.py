"""The in-place restart of Celery's worker: which exits start it again, and the bound on restarts."""

from __future__ import annotations

import threading

from celery import signals

from debate_worker.celery_restarts import RestartBudget, run_until_stopped, worker_starter


class StoppedWorker:
    """What Celery's worker_shutdown is sent by: the worker, with the exit code it stops with."""

    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode


class ExitCodes:
    """Stands in for the Celery app: each ``worker_main`` ends the way Celery's worker does, with
    ``worker_shutdown`` sent by a worker carrying the next exit code (None: it never got that far),
    and may ask for a stop as a signal would."""

    def __init__(self, codes: list[int | None], stop_after: int | None = None) -> None:
        self.codes = codes
        self.stop_after = stop_after
        self.starts: list[list[str]] = []
        self.requested = threading.Event()

    def worker_main(self, argv: list[str] | None = None) -> None:
        self.starts.append(list(argv or []))
        if self.stop_after is not None and len(self.starts) >= self.stop_after:
            self.requested.set()  # Celery sent worker_shutting_down: a signal asked for this stop
        code = self.codes[len(self.starts) - 1]
        if code is not None:
            signals.worker_shutdown.send(sender=StoppedWorker(code))


ARGV = ["worker", "--queues=interactive,batch"]


def run(celery: ExitCodes, budget: RestartBudget) -> tuple[int, list[float]]:
    slept: list[float] = []
    code = run_until_stopped(
        worker_starter(celery, ARGV),
        budget,
        delay_s=0.5,
        sleep=slept.append,
        stop_requested=celery.requested,
    )
    return code, slept


def test_an_unrecoverable_error_starts_the_worker_again_with_the_same_arguments() -> None:
    celery = ExitCodes([1, 1, 0])
    code, slept = run(celery, RestartBudget(5, 600))
    assert code == 0
    assert celery.starts == [ARGV] * 3
    assert slept == [0.5, 0.5]


def test_a_clean_stop_is_not_restarted() -> None:
    celery = ExitCodes([0, 1])
    assert run(celery, RestartBudget(5, 600)) == (0, [])
    assert len(celery.starts) == 1


def test_a_worker_that_stopped_before_it_ran_counts_as_failed() -> None:
    celery = ExitCodes([None, 0])  # no worker_shutdown: Celery's worker never started
    assert run(celery, RestartBudget(5, 600)) == (0, [0.5])
    assert len(celery.starts) == 2


def test_a_stop_asked_for_by_a_signal_keeps_its_exit_code_and_is_not_restarted() -> None:
    celery = ExitCodes([1, 0], stop_after=1)  # a cold shutdown (SIGINT twice) exits with 1
    assert run(celery, RestartBudget(5, 600)) == (1, [])
    assert len(celery.starts) == 1


def test_the_budget_bounds_restarts_within_the_window_and_frees_up_after_it() -> None:
    now = [0.0]
    budget = RestartBudget(2, 60, clock=lambda: now[0])
    celery = ExitCodes([1, 1, 1, 1])
    assert run(celery, budget) == (1, [0.5, 0.5])
    assert len(celery.starts) == 3  # started, restarted twice, then left stopped
    now[0] = 61.0
    assert budget.take() and budget.take() and not budget.take()


def test_no_budget_means_no_restart() -> None:
    celery = ExitCodes([1, 0])
    assert run(celery, RestartBudget(0, 600)) == (1, [])

"""The Celery task that runs one debate job (``parley.run_debate``), handing it to ``JobRunner``.

A job's life: ``queued`` → ``retrieving`` (pool built by the retriever service) → ``debating`` (the
engine runs, checkpointing every completed round) → ``completed`` | ``failed`` | ``cancelled``.

Exactly one result per job, even with redelivery:

* every status change is a conditional transition in the job store (``completed`` only from
  ``debating``; terminal states are never left), so a second run can never write a second result;
* a lease (renewed while the debate runs) keeps two deliveries of one job from running side by side;
* a redelivered job resumes from the last checkpoint with the same pool instead of starting over;
* Parley counts attempts itself and fails a job that has killed its worker ``max_attempts`` times.

The runner is plain asyncio (one event loop per task, so async clients are created per job); the
Celery task is a thin wrapper, which keeps the runner testable without a broker. The runner's lease,
attempts and cancellation are in ``job_runner``, the debate with its pool and checkpoints in
``job_debate``, the worker's clients in ``runtime`` and what a client is told of a failure in
``job_errors``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import redis.exceptions
from celery import Celery
from celery.exceptions import Reject, SoftTimeLimitExceeded

from debate_worker.job_errors import WorkerDraining
from debate_worker.job_runner import JobRunner
from debate_worker.runtime import WorkerRuntime
from services.jobstore import RedisJobStore
from services.observability import telemetry
from services.task_queue import TASK_RUN_DEBATE

log = logging.getLogger("parley.worker")


async def _with_store(runtime: WorkerRuntime, fn: Callable[[RedisJobStore], Awaitable[str]]) -> str:
    store = runtime.store()
    try:
        return await fn(store)
    finally:
        await store.aclose()


def run_job(runtime: WorkerRuntime, job_id: str, node: str | None = None) -> str:
    """Run one job to completion in a fresh event loop (what the Celery task does)."""
    return asyncio.run(_with_store(runtime, lambda store: JobRunner(runtime, store, node).execute(job_id)))


def fail_job(runtime: WorkerRuntime, job_id: str, reason: str) -> None:
    async def _fail(store: RedisJobStore) -> str:
        await JobRunner(runtime, store).fail(job_id, reason)
        return "failed"

    asyncio.run(_with_store(runtime, _fail))


def register_tasks(app: Celery, runtime: WorkerRuntime) -> None:
    """Register ``parley.run_debate`` on ``app``; the task only hands the job id to the runner."""
    settings = runtime.settings

    @app.task(
        name=TASK_RUN_DEBATE,
        acks_late=settings.task_acks_late,
        reject_on_worker_lost=settings.task_reject_on_worker_lost,
        ignore_result=True,
    )
    def run_debate_task(job_id: str) -> str:
        try:
            # The span continues the trace the publisher put into the message headers.
            with telemetry.job_span(job_id, vars(run_debate_task.request)):
                return run_job(runtime, job_id, run_debate_task.request.hostname)
        except WorkerDraining as exc:
            raise Reject("worker shutting down; the job resumes elsewhere", requeue=True) from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            # The job store is unreachable, so the job's state cannot be trusted or written: put the
            # message back (a failed task would be acked and the job left "debating" forever).
            log.warning("job store unavailable while running %s; requeueing: %s", job_id, exc)
            raise Reject(f"job store unavailable: {exc}", requeue=True) from exc
        except SoftTimeLimitExceeded:
            fail_job(
                runtime,
                job_id,
                f"time limit exceeded: the debate ran longer than {settings.task_soft_time_limit:.0f}s",
            )
            return "failed"
        except Exception as exc:
            # Anything else (a bug, an invalid URL, a Redis error reply): the job must still end, or it
            # would stay "debating", its stream open, its batch unfinished and its quota slot taken.
            log.exception("job %s raised %s", job_id, type(exc).__name__)
            try:
                fail_job(runtime, job_id, f"internal error: {type(exc).__name__}: {exc}")
            except redis.exceptions.RedisError as store_exc:
                # The store refuses writes too (out of memory, down): try again later, not in a hot loop.
                time.sleep(settings.store_retry_delay_s)
                raise Reject(f"job store error: {store_exc}", requeue=True) from exc
            return "failed"

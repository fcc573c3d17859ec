"""``JobRunner``: one job from the store to a terminal state, exactly once even with redelivery.

It counts attempts (a job that killed its worker ``max_attempts`` times fails), holds a lease renewed
while the debate runs (two deliveries never run side by side), stops the debate promptly when the job
is cancelled, hands the job back to the queue when its worker shuts down, and turns what went wrong
into a failed job with a reason fit for clients. The debate itself is ``JobDebate``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from typing import Any

from opentelemetry import trace
from pydantic import ValidationError

from debate_worker.job_debate import JobDebate
from debate_worker.job_errors import JobCancelled, PoolUnavailable, WorkerDraining, client_safe, shown_reason
from debate_worker.runtime import WorkerRuntime
from engine.config import DebateConfig
from services.chat_model import LLMError
from services.jobstore import ACTIVE, JobRecord, JobStore
from services.observability.logging_setup import job_log_context
from services.observability.metrics import observe_job, observe_started

log = logging.getLogger("parley.worker")


class JobRunner:
    """Runs one job from the store to a terminal state (or leaves it for redelivery)."""

    def __init__(self, runtime: WorkerRuntime, store: JobStore, node: str | None = None) -> None:
        self.rt = runtime
        self.store = store
        self.token = f"{runtime.hostname}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        # The Celery node running this job: when it shuts down, the job goes back to the queue.
        self.node = node
        self.draining = False

    async def execute(self, job_id: str) -> str:
        """Run ``job_id``; returns the status it ended in (or why it was skipped)."""
        job = await self.store.get_job(job_id)
        if job is None:
            log.warning("job %s not in the store (deleted, expired or never stored); dropping", job_id)
            return "missing"
        # Every line logged while the job runs names it and its batch; the span does the same.
        with job_log_context(job.job_id, job.batch_id):
            if job.batch_id:
                trace.get_current_span().set_attribute("parley.batch_id", job.batch_id)
            started = time.monotonic()
            status = await self._execute(job)
            observe_job(job.queue, status, time.monotonic() - started)
            log.info("job %s ended: %s", job_id, status)
        return status

    async def _execute(self, job: JobRecord) -> str:
        job_id = job.job_id
        if job.status not in ACTIVE:
            # A redelivery of a finished job: the result exists, never produce a second one.
            return f"skipped:{job.status}"
        attempts = await self.store.incr_attempts(job_id)
        if attempts == 0:
            return "missing"  # deleted by its owner (or expired) since it was read
        if attempts > self.rt.settings.max_attempts:
            await self.fail(job_id, f"gave up after {attempts - 1} attempts: the worker was lost each time")
            return "failed"
        if not await self._wait_for_lease(job_id):
            return "skipped:leased"
        try:
            return await self._run(job, attempts)
        finally:
            with contextlib.suppress(Exception):
                await self.store.release_lease(job_id, self.token)

    async def _wait_for_lease(self, job_id: str) -> bool:
        # A previous delivery killed mid-debate leaves its lease behind until it expires; wait that
        # long at most. A live holder keeps renewing it, and then this delivery is the duplicate.
        ttl_ms = int(self.rt.settings.lease_ttl_s * 1000)
        deadline = asyncio.get_running_loop().time() + self.rt.settings.lease_ttl_s + 1.0
        while True:
            if await self.store.acquire_lease(job_id, self.token, ttl_ms):
                return True
            if asyncio.get_running_loop().time() > deadline:
                log.warning("job %s is leased by %s; not running it twice", job_id, "another worker")
                return False
            await asyncio.sleep(min(0.25, self.rt.settings.lease_ttl_s / 4))

    async def _run(self, job: JobRecord, attempts: int) -> str:
        job_id = job.job_id
        try:
            config = DebateConfig.model_validate(job.config)
        except ValidationError as exc:
            await self.fail(job_id, f"invalid config: {exc.errors()[0].get('msg', exc)}")
            return "failed"
        ok = await self.store.transition(
            job_id,
            "retrieving",
            ACTIVE,
            fields={"worker": self.token, "started_at": time.time(), "rounds": config.rounds},
        )
        if not ok:
            return "skipped:cancelled"
        if attempts == 1:
            observe_started(job.queue, time.time() - job.created_at)
        runner = asyncio.current_task()
        assert runner is not None
        watcher = asyncio.create_task(self._watch(job, runner))
        try:
            return await JobDebate(self.rt, self.store).run(job, config, attempts)
        except (JobCancelled, asyncio.CancelledError):
            # The watcher may cancel this task once more after the debate already stopped (it saw
            # the same cancellation): stop it and drop its requests before touching the store.
            await _stop(watcher)
            while runner.cancelling():
                runner.uncancel()
            if self.draining:
                await self._requeue_for_shutdown(job_id)
                raise WorkerDraining(job_id) from None
            # Cancelled (or deleted) by the user, or finished elsewhere; the store already says so.
            current = await self.store.get_job(job_id)
            return f"skipped:{current.status if current else 'missing'}"
        except PoolUnavailable as exc:
            await self.fail(job_id, str(exc))
            return "failed"
        except LLMError as exc:
            log.warning("job %s: LLM error %s: %s", job_id, type(exc).__name__, exc.reason)
            await self.fail(job_id, f"LLM error: {type(exc).__name__}: {shown_reason(exc)}")
            return "failed"
        except ValueError as exc:
            await self.fail(job_id, f"invalid job: {exc}")
            return "failed"
        finally:
            await _stop(watcher)

    async def _watch(self, started: JobRecord, runner: asyncio.Task[Any]) -> None:
        """Renew the lease and stop the debate promptly when the job is cancelled; write the job back
        when its record vanished without being removed (a Redis failover lost it)."""
        ttl = self.rt.settings.lease_ttl_s
        interval = min(0.5, ttl / 3)
        job_id, last = started.job_id, started
        while True:
            await asyncio.sleep(interval)
            try:
                job = await self.store.get_job(job_id)
                renewed = await self.store.acquire_lease(job_id, self.token, int(ttl * 1000))
                if job is None and await self.store.restore_job(self._as_running(last)):
                    log.warning("job %s: its record vanished (a Redis failover); written back", job_id)
                    continue
            except Exception:  # Redis blip: keep going, the next tick retries
                log.exception("lease renewal for %s failed", job_id)
                continue
            if job is not None:
                last = job
            if job is None or job.status not in ACTIVE or not renewed:
                runner.cancel()
                return
            if self.node is not None and await self._node_draining():
                self.draining = True
                runner.cancel()
                return

    def _as_running(self, job: JobRecord) -> JobRecord:
        """The job as this worker runs it, for ``restore_job``: status ``debating`` whatever this
        watcher saw last (it reads every half second and the debate moves on in between; ``debating``
        lets the debate both start its rounds and complete), held by this worker, one attempt used."""
        return job.model_copy(
            update={"status": "debating", "worker": self.token, "attempts": max(job.attempts, 1)}
        )

    async def _node_draining(self) -> bool:
        try:
            return await self.store.is_draining(self.node or "")
        except Exception:  # a Redis blip is not a shutdown
            return False

    async def _requeue_for_shutdown(self, job_id: str) -> None:
        """Hand the job back: queued again (resuming from its last checkpoint), the attempt not
        counted, so a restarted or another worker picks it up at once instead of waiting for the
        broker's visibility timeout."""
        await self.store.transition(
            job_id,
            "queued",
            ("retrieving", "debating"),
            event="job.requeued",
            data={"reason": "worker shutting down; resumes from the last completed round"},
        )
        await self.store.add_attempts(job_id, -1)
        log.info("job %s handed back to the queue: worker %s is shutting down", job_id, self.node)

    async def fail(self, job_id: str, reason: str) -> bool:
        """End the job as failed. The client sees the reason without internal addresses."""
        log.warning("job %s failed: %s", job_id, reason)
        shown = client_safe(reason)
        return await self.store.transition(
            job_id, "failed", ACTIVE, event="job.failed", data={"error": shown}, fields={"error": shown}
        )


async def _stop(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended (idempotent)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task

"""Jobs whose worker vanished are requeued or failed: the periodic sweep of lapsed leases.

A running job's worker renews the job's lease every ``lease_ttl_s / 3``. A worker that disappears
without handing its job back (Celery's hard time limit kills the pool process and acknowledges the
message; the OOM killer; a lost host) leaves the job ``retrieving``/``debating`` with no lease. The
sweep finds such jobs, waits one more lease period (a redelivered message may be about to take the
job over), and then publishes the job again, or fails it once it has used ``max_attempts``. Only one
worker sweeps at a time (a Redis lock); the job store's conditional transitions make a sweep that
races with a finishing job harmless.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from debate_worker.worker_settings import WorkerSettings
from services.jobstore import RedisJobStore

log = logging.getLogger("parley.worker.sweep")

RUNNING = ("retrieving", "debating")


@dataclass
class SweepReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    watched: list[str] = field(default_factory=list)  # lease lapsed, waiting one more period


class JobSweeper:
    """One sweep pass: ``await sweeper.sweep()``; ``publish(job_id, queue)`` sends a new message."""

    def __init__(
        self, store: RedisJobStore, settings: WorkerSettings, publish: Callable[[str, str], None]
    ) -> None:
        self.store = store
        self.settings = settings
        self.publish = publish

    async def sweep(self) -> SweepReport | None:
        """Check every running job once; None when another worker holds the sweep lock."""
        r = self.store.redis
        interval_ms = max(50, int(self.settings.sweep_interval_s * 1000))
        if not await r.set(f"{self.store.prefix}:sweep:lock", "1", nx=True, px=interval_ms):
            return None
        report = SweepReport()
        async for key in r.scan_iter(match=f"{self.store.prefix}:owner:*:active", count=500):
            for job_id in await r.smembers(key):
                await self._check(job_id, report)
        return report

    async def _check(self, job_id: str, report: SweepReport) -> None:
        r = self.store.redis
        status, attempts, queue, lapsed_at = await r.hmget(
            self.store.k_job(job_id), ["status", "attempts", "queue", "lapsed_at"]
        )
        if status not in RUNNING:
            return
        if await r.exists(self.store.k_lease(job_id)):
            if lapsed_at:
                await self.store.set_fields(job_id, {"lapsed_at": ""})
            return
        now = time.time()
        if not lapsed_at:
            # First sighting: give a redelivered message one lease period to take the job over.
            await self.store.set_fields(job_id, {"lapsed_at": now})
            report.watched.append(job_id)
            return
        if now - float(lapsed_at) < self.settings.lease_ttl_s:
            report.watched.append(job_id)
            return
        used = int(attempts or 0)
        if used >= self.settings.max_attempts:
            reason = (
                f"its worker stopped without finishing it {used} times (hard time limit of "
                f"{self.settings.task_time_limit:.0f}s, or the process was killed); gave up"
            )
            if await self.store.transition(
                job_id,
                "failed",
                RUNNING,
                event="job.failed",
                data={"error": reason},
                fields={"error": reason},
            ):
                log.warning("job %s failed by the sweep: %s", job_id, reason)
                report.failed.append(job_id)
            return
        # Publish first: a job marked queued without a message would never run.
        self.publish(job_id, queue or "")
        if await self.store.transition(
            job_id,
            "queued",
            RUNNING,
            event="job.requeued",
            data={"reason": "its worker stopped; resumes from the last completed round"},
            fields={"lapsed_at": ""},
        ):
            log.warning("job %s requeued by the sweep (attempt %d used)", job_id, used)
            report.requeued.append(job_id)


def start_sweeping(settings: WorkerSettings, publish: Callable[[str, str], None]) -> threading.Event:
    """Run the sweep every ``sweep_interval_s`` in a daemon thread; set the returned event to stop."""
    stop = threading.Event()
    if settings.sweep_interval_s <= 0:
        return stop

    async def loop() -> None:
        store = RedisJobStore.from_url(
            settings.redis_url, prefix=settings.key_prefix, ttl_s=settings.job_ttl_s
        )
        sweeper = JobSweeper(store, settings, publish)
        try:
            while not stop.is_set():
                try:
                    await sweeper.sweep()
                except Exception:  # a Redis blip: the next pass tries again
                    log.exception("sweep failed")
                await asyncio.sleep(settings.sweep_interval_s)
        finally:
            await store.aclose()

    threading.Thread(target=lambda: asyncio.run(loop()), name="parley-sweep", daemon=True).start()
    return stop

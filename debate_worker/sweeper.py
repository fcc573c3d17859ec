"""Jobs whose worker vanished are requeued or failed: the periodic sweep of lapsed leases.

A running job's worker renews the job's lease every ``lease_ttl_s / 3``. A worker that disappears
without handing its job back (Celery's hard time limit kills the pool process and acknowledges the
message; the OOM killer; a lost host) leaves the job ``retrieving``/``debating`` with no lease. The
sweep finds such jobs, waits one more lease period (a redelivered message may be about to take the
job over), and then publishes the job again, or fails it once it has used ``max_attempts``. Only one
worker sweeps at a time (a Redis lock); the job store's conditional transitions make a sweep that
races with a finishing job harmless.

Two more kinds of stuck job are found by the same pass:

* a ``queued`` job whose broker message was lost (a broker flushed or restored from an older
  snapshot, a publish that failed after the job was stored, a message deleted): once it has been
  queued longer than ``orphan_after_s`` and its id is in no queue and no unacknowledged delivery
  younger than ``orphan_after_s`` on two reads of the broker in a row, it is published again, or
  failed once it has used its attempts.
  With the defaults (40 s, reads at most every 20 s, a sweep every 15 s) a lost message is sent again
  within about 100 s of the loss. The broker is read only when such a candidate exists, by every worker
  together at most once per ``orphan_after_s / 2`` and, for a long queue, no faster than
  ``orphan_scan_rate`` messages per second on average (in pages, so Redis is never blocked by one
  large reply): a long but healthy queue costs a bounded, steady read, not one that grows with how
  often the sweep runs;
* an id in an owner's active set whose job record has expired: it is removed, so a key is never held
  at its active-job limit by jobs that no longer exist.

The same pass keeps retention exact (``PARLEY_JOB_TTL_S``, the store's ``ttl_s``):

* an unfinished job whose keys are half-way to expiring has its retention restarted, so a job that
  waits in the queue or runs longer than the retention is never lost to expiry (the owner's active
  set likewise);
* ids in the owners' listing indexes (``owner:*:jobs`` / ``owner:*:batches``) older than the
  retention whose record has expired are removed, a bounded number per index and pass, so an index
  holds what is retained rather than the last ``OWNER_INDEX_MAX`` ids ever submitted.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from debate_worker.worker_settings import WorkerSettings
from services.jobstore import ACTIVE, RedisJobStore
from services.redis_connect import async_client
from services.task_queue import QUEUE_BATCH, QUEUE_INTERACTIVE

log = logging.getLogger("parley.worker.sweep")

RUNNING = ("retrieving", "debating")
# kombu's Redis transport: one list per queue and priority, and the hash of delivered, unacked messages.
_PRIORITY_SEP = "\x06\x16"
_PRIORITIES = (0, 3, 6, 9)
_UNACKED = "unacked"
_UNACKED_INDEX = "unacked_index"  # delivery tag -> when it was delivered
# Message headers carry the task's arguments as text (argsrepr): the job id is found there.
_JOB_ID = re.compile(r"job_[0-9a-f]{32}")
_PAGE = 1000  # messages per LRANGE: one reply stays small however long the queue is
_PRUNE_PAGE = 500  # listing-index ids checked per read
_PRUNE_BUDGET = 2000  # listing-index ids checked per index and pass: a pass stays short


@dataclass
class SweepReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    watched: list[str] = field(default_factory=list)  # lease lapsed, waiting one more period
    orphaned: list[str] = field(default_factory=list)  # queued without a message: published again
    expired: list[str] = field(default_factory=list)  # ids removed from active sets: record gone
    kept_alive: list[str] = field(default_factory=list)  # unfinished jobs whose retention restarted
    pruned: int = 0  # ids of expired jobs and batches removed from the owners' listing indexes
    broker_messages_read: int = 0  # what this pass read of the broker (0 when it was not read)


class JobSweeper:
    """One sweep pass: ``await sweeper.sweep()``; ``publish(job_id, queue)`` sends a new message."""

    def __init__(
        self,
        store: RedisJobStore,
        settings: WorkerSettings,
        publish: Callable[[str, str], None],
        *,
        broker: aioredis.Redis | None = None,
        queues: Iterable[str] = (QUEUE_INTERACTIVE, QUEUE_BATCH),
    ) -> None:
        self.store = store
        self.settings = settings
        self.publish = publish
        # Where the messages are: the job store's Redis unless the broker is another one.
        self.broker = broker if broker is not None else store.redis
        self.queues = tuple(queues)

    async def sweep(self) -> SweepReport | None:
        """Check every unfinished job once; None when another worker holds the sweep lock."""
        r = self.store.redis
        interval_ms = max(50, int(self.settings.sweep_interval_s * 1000))
        if not await r.set(f"{self.store.prefix}:sweep:lock", "1", nx=True, px=interval_ms):
            return None
        report = SweepReport()
        waiting: list[str] = []
        async for key in r.scan_iter(match=f"{self.store.prefix}:owner:*", count=500):
            if key.endswith(":jobs"):
                report.pruned += await self._prune(key, self.store.k_job)
            elif key.endswith(":batches"):
                report.pruned += await self._prune(key, self.store.k_batch)
            elif key.endswith(":active"):
                # Kept as long as the jobs in it (they are kept alive below).
                await r.expire(key, self.store.ttl_s)
                for job_id in await r.smembers(key):
                    if await self._check(key, job_id, report):
                        waiting.append(job_id)
        # Reading the broker costs O(messages), and a long healthy queue keeps candidates around all
        # the time: it is read at most once per orphan_after_s / 2 by all workers together (the next
        # allowed time is kept in Redis, under the sweep lock), and no faster than orphan_scan_rate
        # messages per second on average, however often the sweep runs.
        if waiting and time.time() >= float(await r.get(self._k_next_scan) or 0):
            await self._find_orphans(waiting, report)
            pause = max(
                self.settings.orphan_after_s / 2,
                report.broker_messages_read / self.settings.orphan_scan_rate,
            )
            await r.set(self._k_next_scan, time.time() + pause, ex=int(pause) + 60)  # no key lives forever
        return report

    @property
    def _k_next_scan(self) -> str:
        return f"{self.store.prefix}:sweep:next_broker_read"

    async def _read_broker(self) -> tuple[set[str], int]:
        """(job ids with a message in a queue or an unacknowledged delivery, messages read)."""
        found: set[str] = set()
        read = 0
        for queue in self.queues:
            for pri in _PRIORITIES:
                name = queue if pri == 0 else f"{queue}{_PRIORITY_SEP}{pri}"
                # Pages from the head (kombu pushes at the head, workers pop at the tail): a message
                # pushed meanwhile moves towards the pages still to read, so none present is skipped.
                start = 0
                while True:
                    page = await self.broker.lrange(name, start, start + _PAGE - 1)
                    for message in page:
                        found.update(_JOB_ID.findall(_text(message)))
                    read += len(page)
                    if len(page) < _PAGE:
                        break
                    start += _PAGE
        # A delivery counts only while it is young: a queued job whose only message was delivered
        # longer than orphan_after_s ago is held by no one (the consumer died with a Redis restart;
        # kombu gives it back only after the visibility timeout, an hour by default). Sending it again
        # is safe: the job's lease lets one copy run, the others find it taken or finished.
        fresh = await self.broker.zrangebyscore(
            _UNACKED_INDEX, time.time() - self.settings.orphan_after_s, "+inf"
        )
        unacked = await self.broker.hmget(_UNACKED, fresh) if fresh else []
        for message in unacked:
            if message is not None:
                found.update(_JOB_ID.findall(_text(message)))
        return found, read + len(unacked)

    async def broker_job_ids(self) -> set[str]:
        """Every job id that has a message in a queue or an unacknowledged delivery."""
        return (await self._read_broker())[0]

    async def _find_orphans(self, waiting: list[str], report: SweepReport) -> None:
        """Queued jobs long past ``orphan_after_s``: those absent from the broker twice are resent."""
        present, report.broker_messages_read = await self._read_broker()
        r = self.store.redis
        for job_id in waiting:
            if job_id in present:
                await self.store.set_fields(job_id, {"missing_at": ""})
                continue
            status, attempts, queue, missing_at = await r.hmget(
                self.store.k_job(job_id), ["status", "attempts", "queue", "missing_at"]
            )
            if status != "queued":
                continue
            if not missing_at:
                await self.store.set_fields(job_id, {"missing_at": time.time()})
                report.watched.append(job_id)
                continue
            await self._resend(job_id, int(attempts or 0), queue or "", report)

    async def _resend(self, job_id: str, used: int, queue: str, report: SweepReport) -> None:
        if used >= self.settings.max_attempts:
            reason = f"its queue message was lost after {used} attempts; gave up"
            if await self.store.transition(
                job_id,
                "failed",
                ("queued",),
                event="job.failed",
                data={"error": reason},
                fields={"error": reason},
            ):
                report.failed.append(job_id)
            return
        self.publish(job_id, queue)
        # Still queued; the event says why it waited, and the clock restarts from now.
        await self.store.transition(
            job_id,
            "queued",
            ("queued",),
            event="job.requeued",
            data={"reason": "its queue message was lost; sent again"},
            fields={"missing_at": ""},
        )
        log.warning("job %s was queued without a message; published again", job_id)
        report.orphaned.append(job_id)

    async def _prune(self, index: str, record_key: Callable[[str], str]) -> int:
        """Remove from a listing index the ids older than the retention whose record is gone; ids of
        records still kept (a job that finished late) stay. At most ``_PRUNE_BUDGET`` ids checked."""
        r = self.store.redis
        cutoff = time.time() - self.store.ttl_s
        removed = checked = 0
        while checked < _PRUNE_BUDGET:
            # Removed ids shift the rest down: the next page starts after the ids still kept.
            ids = await r.zrangebyscore(index, "-inf", cutoff, start=checked - removed, num=_PRUNE_PAGE)
            if not ids:
                break
            async with r.pipeline(transaction=False) as pipe:
                for item in ids:
                    pipe.exists(record_key(item))
                found = await pipe.execute()
            gone = [item for item, exists in zip(ids, found, strict=True) if not exists]
            if gone:
                await r.zrem(index, *gone)
            checked += len(ids)
            removed += len(gone)
            if len(ids) < _PRUNE_PAGE:
                break
        return removed

    async def _check(self, active_key: str, job_id: str, report: SweepReport) -> bool:
        """Requeue or fail a running job whose lease lapsed; True for a queued job that has waited
        longer than ``orphan_after_s`` (its message is looked for afterwards, once for all). An
        unfinished job half-way to expiring has its retention restarted."""
        r = self.store.redis
        async with r.pipeline(transaction=False) as pipe:
            pipe.hmget(self.store.k_job(job_id), ["status", "attempts", "queue", "lapsed_at", "updated_at"])
            pipe.ttl(self.store.k_job(job_id))
            (status, attempts, queue, lapsed_at, updated_at), left = await pipe.execute()
        if status is None:
            # The record expired (or was deleted) while its id stayed here: never count it again.
            await r.srem(active_key, job_id)
            report.expired.append(job_id)
            return False
        if status in ACTIVE and left < self.store.ttl_s / 2 and await self.store.keep_alive(job_id):
            report.kept_alive.append(job_id)
        if status == "queued":
            return time.time() - float(updated_at or 0) > self.settings.orphan_after_s
        if status not in RUNNING:
            return False
        await self._check_lease(job_id, attempts, queue, lapsed_at, report)
        return False

    async def _check_lease(
        self, job_id: str, attempts: Any, queue: Any, lapsed_at: Any, report: SweepReport
    ) -> None:
        r = self.store.redis
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


def start_sweeping(
    settings: WorkerSettings, ttl_s: int, publish: Callable[[str, str], None]
) -> threading.Event:
    """Run the sweep every ``sweep_interval_s`` in a daemon thread; set the returned event to stop.
    ``ttl_s`` is the job store's retention (``RetentionSettings``), the one the gateway uses."""
    stop = threading.Event()
    if settings.sweep_interval_s <= 0:
        return stop

    async def loop() -> None:
        store = RedisJobStore.from_url(
            settings.redis_spec(),
            prefix=settings.key_prefix,
            ttl_s=ttl_s,
            wait_replicas=settings.redis_wait_replicas,
            wait_timeout_ms=settings.redis_wait_timeout_ms,
        )
        broker = None
        if settings.broker != settings.redis_url:
            broker = async_client(settings.broker_spec(), decode_responses=True, socket_connect_timeout=5.0)
        sweeper = JobSweeper(store, settings, publish, broker=broker)
        try:
            while not stop.is_set():
                try:
                    await sweeper.sweep()
                except Exception:  # a Redis blip: the next pass tries again
                    log.exception("sweep failed")
                await asyncio.sleep(settings.sweep_interval_s)
        finally:
            await store.aclose()
            if broker is not None:
                await broker.aclose()  # type: ignore[attr-defined]  # stubs predate redis 5

    threading.Thread(target=lambda: asyncio.run(loop()), name="parley-sweep", daemon=True).start()
    return stop


def _text(message: Any) -> str:
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)

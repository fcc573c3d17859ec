"""Removing jobs and batches for good (a client's ``DELETE``) from the Redis job store
(``RedisJobStore`` includes it).

A removed job leaves nothing readable: its record, result, events, checkpoint, lease and its place in
the owner's listing and active set go in one Lua step (``REMOVE_JOB_LUA``), and what it was counted in
the owner's storage is taken off. Two things outlive it on purpose: the tokens it used stay charged to
the owner's day, and a tombstone (owner and usage day, kept ``ttl_s``) lets a call that was in flight
when it was removed be charged there too. Every other write a worker may still make (a transition, an
event, progress, a checkpoint, an attempt) finds no record and writes nothing, so the job is never
re-created.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from parley_wire.models import TERMINAL
from services.jobstore.keys import JobKeys
from services.jobstore.records import RECORD_OVERHEAD, BatchRecord, JobRecord, removed_size

_TERMINAL = ",".join(sorted(TERMINAL))
# Jobs of a batch removed per round trip (one pipeline reads them, one removes them).
_CHUNK = 200


class RedisRemoval(JobKeys):
    """``remove_job`` and ``remove_batch``; the scripts are registered by ``RedisJobStore``."""

    redis: aioredis.Redis
    ttl_s: int
    _remove_job: Any
    _remove_batch: Any

    async def create_jobs(self, jobs: Sequence[JobRecord], batch: BatchRecord | None = None) -> None:
        raise NotImplementedError  # RedisJobStore's

    async def emit(self, job_id: str, event: str, data: dict[str, Any]) -> str | None:
        raise NotImplementedError  # RedisJobStore's

    async def restore_job(self, job: JobRecord) -> bool:
        """Write back a job whose record vanished while a worker ran it, from that worker's copy.

        Redis replicates asynchronously: a failover loses what the old primary had not yet sent to
        the replica that took over, which can be a whole job submitted moments before. The worker
        still holds the job as it last read it, so the job is written back as it was (status, attempts,
        owner, question, config) and runs to its end. Not for a job removed on purpose: its tombstone
        says so and False is returned, as when the record exists. A batch lost with it is not
        restored (the worker never had it). The owner's quota reservation is not re-made."""
        if await self.redis.exists(self.k_tombstone(job.job_id), self.k_job(job.job_id)):
            return False
        await self.create_jobs([job])
        await self.emit(job.job_id, "job.restored", {"reason": "its record was lost with a Redis failover"})
        return True

    async def remove_job(self, job_id: str) -> bool:
        """Remove a finished job for good: its record, result, events and place in the listing, and
        what it was counted in its owner's storage; False when it is missing or not finished (cancel
        it first). The tokens it used stay charged to its owner, and so does a call still in flight
        (its tombstone, see ``REMOVE_JOB_LUA``); no later write of a worker re-creates it."""
        raw = await self.redis.hgetall(self.k_job(job_id))
        if not raw:
            return False
        keys, args = self._remove_job_call(job_id, raw)
        return bool(await self._remove_job(keys=keys, args=args))

    def _remove_job_call(self, job_id: str, raw: dict[str, str]) -> tuple[list[str], list[str | int]]:
        """The keys and arguments of ``REMOVE_JOB_LUA`` for the job stored as ``raw``."""
        owner = raw.get("owner", "")
        stored, result = removed_size(raw)
        created = float(raw.get("created_at") or 0) or None
        finished = float(raw.get("finished_at") or 0) or None
        keys = [
            self.k_job(job_id),
            self.k_events(job_id),
            self.k_checkpoint(job_id),
            self.k_lease(job_id),
            self.k_active(owner),
            self.k_owner_jobs(owner),
            self.k_tombstone(job_id),
            self.k_bytes(owner, created),
            self.k_bytes(owner, finished),
        ]
        return keys, [job_id, self.ttl_s, stored, result, _TERMINAL]

    async def remove_batch(self, batch_id: str) -> bool:
        """Remove a batch and its items for good (each as ``remove_job``), in chunks of a pipeline each.

        False when the batch is missing, or when an item is not finished: that item and the batch are
        then kept (cancel the batch's unfinished items first), the finished items are removed.
        """
        raw = await self.redis.hgetall(self.k_batch(batch_id))
        if not raw:
            return False
        kept = 0
        start = 0
        while True:
            ids = list(await self.redis.lrange(self.k_batch_jobs(batch_id), start, start + _CHUNK - 1))
            if not ids:
                break
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hgetall(self.k_job(job_id))
                rows = await pipe.execute()
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id, row in zip(ids, rows, strict=True):
                    if row:
                        keys, args = self._remove_job_call(job_id, row)
                        await self._remove_job(keys=keys, args=args, client=pipe)
                removed = await pipe.execute()
            kept += sum(1 for row in rows if row) - sum(1 for r in removed if r)
            start += len(ids)
        if kept:
            return False
        owner = raw.get("owner", "")
        created = float(raw.get("created_at") or 0) or None
        keys = [
            self.k_batch(batch_id),
            self.k_batch_jobs(batch_id),
            self.k_owner_batches(owner),
            self.k_bytes(owner, created),
        ]
        stored = len((raw.get("config") or "").encode()) + RECORD_OVERHEAD
        return bool(await self._remove_batch(keys=keys, args=[batch_id, stored]))

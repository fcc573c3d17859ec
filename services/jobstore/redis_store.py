"""``RedisJobStore``: the ``JobStore`` on Redis (key layout in ``keys``, Lua scripts in ``scripts``).

What a finished job keeps, and for how long: its record (with its result packed, ``result_z``), its
events packed into the record (``events_z``, the stream itself lapses ``EVENTS_GRACE_S`` later), its
place in its batch and in the owner's listing, all expiring ``ttl_s`` after its last write. Its
checkpoint, its lease and a pool the client brought are deleted when it finishes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from parley_wire.models import ACTIVE, STATUSES, TERMINAL
from services.jobstore.records import (
    DAY_S,
    EVENTS_GRACE_S,
    EVENTS_MAXLEN,
    OWNER_INDEX_MAX,
    RECORD_OVERHEAD,
    BatchRecord,
    Event,
    JobFull,
    JobRecord,
    JobStatus,
    draining_key,
    dump_field,
    pack_events,
    pack_text,
    parse_job,
    stored_result,
    stored_size,
    unpack_events,
    usage_day,
)
from services.jobstore.redis_quota import RedisQuota
from services.jobstore.redis_removal import RedisRemoval
from services.jobstore.scripts import (
    ATTEMPTS_LUA,
    CHARGE_LUA,
    CHECKPOINT_LUA,
    COMPACT_LUA,
    KEEP_ALIVE_LUA,
    LEASE_LUA,
    READ_EVENTS_LUA,
    REMOVE_BATCH_LUA,
    REMOVE_JOB_LUA,
    RESERVE_LUA,
    TRANSITION_LUA,
)
from services.redis_connect import RedisSpec, async_client, wait_for_replicas

log = logging.getLogger("parley.jobstore")

_ACTIVE = ",".join(ACTIVE)

# A record an owner's listing index names (``list_jobs``, ``list_batches``).
_Listed = TypeVar("_Listed", JobRecord, BatchRecord)


class RedisJobStore(RedisQuota, RedisRemoval):
    """The ``JobStore`` on Redis. Pass an existing ``redis.asyncio.Redis`` (tests) or a URL.

    ``ttl_s`` is the retention (``RetentionSettings.job_ttl_s``): every process that writes jobs must
    pass the same value, so it has no default here.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        prefix: str = "parley",
        ttl_s: int,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_s = ttl_s
        # A new job (or batch) and a job's end wait for this many replicas: no failover takes them back.
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self._transition = redis.register_script(TRANSITION_LUA)
        self._lease = redis.register_script(LEASE_LUA)
        self._reserve = redis.register_script(RESERVE_LUA)
        self._charge = redis.register_script(CHARGE_LUA)
        self._compact = redis.register_script(COMPACT_LUA)
        self._read_events = redis.register_script(READ_EVENTS_LUA)
        self._checkpoint = redis.register_script(CHECKPOINT_LUA)
        self._keep_alive = redis.register_script(KEEP_ALIVE_LUA)
        self._attempts = redis.register_script(ATTEMPTS_LUA)
        self._remove_job = redis.register_script(REMOVE_JOB_LUA)
        self._remove_batch = redis.register_script(REMOVE_BATCH_LUA)

    @classmethod
    def from_url(
        cls, url: str | RedisSpec, *, prefix: str = "parley", ttl_s: int, timeout_s: float = 5.0, **kw: int
    ) -> RedisJobStore:
        """A store with its own connection pool; short connect timeouts so a dead Redis fails fast.
        ``url`` is a plain URL or a ``RedisSpec`` (TLS, ACL user, Sentinel; ``services.redis_connect``)."""
        spec = url if isinstance(url, RedisSpec) else RedisSpec("redis_url", url)
        client = async_client(
            spec,
            decode_responses=True,
            socket_connect_timeout=timeout_s,
            socket_timeout=None,  # blocking XREAD for SSE must be allowed to wait
            health_check_interval=30,
        )
        return cls(client, prefix=prefix, ttl_s=ttl_s, **kw)

    async def replicated(self, what: str) -> bool:
        """Whether the writes so far are on ``wait_replicas`` replicas (True at once when that is 0);
        waits ``wait_timeout_ms`` at most. ``what`` names them in the warning when they are not."""
        key = f"{self.prefix}:replicated"
        acked = await wait_for_replicas(self.redis, key, self.wait_replicas, self.wait_timeout_ms, what=what)
        return acked >= self.wait_replicas

    async def aclose(self) -> None:
        await self.redis.aclose()  # type: ignore[attr-defined]  # stubs predate redis 5

    async def ping(self) -> None:
        await self.redis.ping()

    async def create_jobs(self, jobs: Sequence[JobRecord], batch: BatchRecord | None = None) -> None:
        """Store jobs (and their batch) in one MULTI/EXEC, so a batch exists whole or not at all."""
        now = time.time()
        ttl = self.ttl_s
        async with self.redis.pipeline(transaction=True) as pipe:
            if batch is not None:
                pipe.hset(
                    self.k_batch(batch.batch_id),
                    mapping={
                        "batch_id": batch.batch_id,
                        "owner": batch.owner,
                        "total": str(batch.total),
                        "created_at": repr(batch.created_at or now),
                        "config": dump_field(batch.config),
                    },
                )
                pipe.expire(self.k_batch(batch.batch_id), ttl)
                # RPUSH in chunks: one command with 10,000 arguments is fine, but keep it bounded.
                ids = [j.job_id for j in jobs]
                for i in range(0, len(ids), 1000):
                    pipe.rpush(self.k_batch_jobs(batch.batch_id), *ids[i : i + 1000])
                pipe.expire(self.k_batch_jobs(batch.batch_id), ttl)
                pipe.zadd(self.k_owner_batches(batch.owner), {batch.batch_id: batch.created_at or now})
                pipe.zremrangebyrank(self.k_owner_batches(batch.owner), 0, -OWNER_INDEX_MAX - 1)
                pipe.expire(self.k_owner_batches(batch.owner), ttl)
            for job in jobs:
                record = job.model_copy(update={"created_at": job.created_at or now, "updated_at": now})
                mapping: dict[str | bytes, bytes | float | int | str] = {
                    k: dump_field(v) for k, v in record.model_dump().items() if v is not None
                }
                pipe.hset(self.k_job(job.job_id), mapping=mapping)
                pipe.expire(self.k_job(job.job_id), ttl)
                pipe.xadd(
                    self.k_events(job.job_id),
                    {"type": "job.queued", "data": json.dumps({"job_id": job.job_id, "queue": job.queue})},
                    maxlen=EVENTS_MAXLEN,
                    approximate=True,
                )
                pipe.expire(self.k_events(job.job_id), ttl)
                pipe.sadd(self.k_active(job.owner), job.job_id)
            # ZADD in chunks like RPUSH above; ids with equal scores (one batch) order by id.
            for i in range(0, len(jobs), 1000):
                chunk = jobs[i : i + 1000]
                pipe.zadd(self.k_owner_jobs(chunk[0].owner), {j.job_id: j.created_at or now for j in chunk})
            written = stored_size(jobs, batch)
            if written:
                owner = batch.owner if batch is not None else jobs[0].owner
                pipe.incrby(self.k_bytes(owner, now), written)
                pipe.expire(self.k_bytes(owner, now), ttl + DAY_S)
            if jobs:
                pipe.expire(self.k_active(jobs[0].owner), ttl)
                pipe.zremrangebyrank(self.k_owner_jobs(jobs[0].owner), 0, -OWNER_INDEX_MAX - 1)
                pipe.expire(self.k_owner_jobs(jobs[0].owner), ttl)
            await pipe.execute()

    async def get_job(self, job_id: str) -> JobRecord | None:
        raw = await self.redis.hgetall(self.k_job(job_id))
        return parse_job(raw) if raw else None

    async def get_jobs(self, job_ids: Sequence[str], *, with_result: bool = False) -> list[JobFull | None]:
        """Many jobs in one round trip (batch progress and results)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hgetall(self.k_job(job_id))
            rows = await pipe.execute()
        out: list[JobFull | None] = []
        for raw in rows:
            if not raw:
                out.append(None)
                continue
            out.append(JobFull(parse_job(raw), stored_result(raw) if with_result else None))
        return out

    async def job_statuses(self, job_ids: Sequence[str]) -> list[str | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hget(self.k_job(job_id), "status")
            return list(await pipe.execute())

    async def get_result(self, job_id: str) -> dict[str, Any] | None:
        packed, plain = await self.redis.hmget(self.k_job(job_id), ["result_z", "result"])
        text = stored_result({"result_z": packed or "", "result": plain or ""})
        return json.loads(text) if text else None

    async def transition(
        self,
        job_id: str,
        to: JobStatus,
        allowed_from: Sequence[str],
        *,
        event: str | None = None,
        data: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> bool:
        """Move a job to ``to`` only if its status is in ``allowed_from``; writes ``event`` atomically.

        This is what makes a job produce one result: ``completed`` is allowed only from ``debating``,
        and the terminal states are never left. A ``result`` field is stored packed (``result_z``),
        and a job that finished has its event stream packed into its record (``_compact_events``).
        """
        if fields and "result" in fields:
            fields = dict(fields)
            fields["result_z"] = pack_text(dump_field(fields.pop("result")))
        moved = await self._run_transition(job_id, to, allowed_from, event, data, fields) is not None
        if moved and to in TERMINAL:
            await self._compact_events(job_id)
            await self.replicated(f"the end of job {job_id}")
        return moved

    async def _compact_events(self, job_id: str) -> None:
        """Pack a finished job's event stream into its record; the stream lapses soon after.

        Only saves memory: a job left unpacked (Redis went away between the two steps) is read from
        its stream as before, until it expires like everything else of the job.
        """
        try:
            entries = await self.redis.xrange(self.k_events(job_id))
            if not entries:
                return
            rows = [(entry_id, f.get("type", ""), f.get("data") or "{}") for entry_id, f in entries]
            grace_ms = min(EVENTS_GRACE_S, self.ttl_s) * 1000
            await self._compact(
                keys=[self.k_job(job_id), self.k_events(job_id)],
                args=[pack_events(rows), entries[-1][0], grace_ms],
            )
        except RedisError as exc:
            log.warning("could not pack the events of finished job %s (kept as a stream): %s", job_id, exc)

    async def emit(self, job_id: str, event: str, data: dict[str, Any]) -> str | None:
        """Append an event while the job is still running; ``None`` once it is finished or gone.

        The guard keeps stray engine events from landing after ``job.cancelled``.
        """
        out = await self._run_transition(job_id, "", ACTIVE, event, data, None)
        return out if out and out != "ok" else None

    async def set_fields(self, job_id: str, fields: dict[str, Any]) -> bool:
        """Update progress fields of an unfinished job (round, worker, ...)."""
        return await self._run_transition(job_id, "", ACTIVE, None, None, fields) is not None

    async def _run_transition(
        self,
        job_id: str,
        to: str,
        allowed_from: Sequence[str],
        event: str | None,
        data: dict[str, Any] | None,
        fields: dict[str, Any] | None,
    ) -> str | None:
        owner, day, batch_id = await self.redis.hmget(self.k_job(job_id), ["owner", "usage_day", "batch_id"])
        if owner is None:
            return None
        args: list[str] = [
            to,
            ",".join(allowed_from),
            event or "",
            json.dumps(data or {}, separators=(",", ":")),
            repr(time.time()),
            str(self.ttl_s),
            job_id,
        ]
        for key, value in (fields or {}).items():
            args += [key, dump_field(value)]
        keys = [
            self.k_job(job_id),
            self.k_events(job_id),
            self.k_active(owner),
            self.k_checkpoint(job_id),
            self.k_lease(job_id),
            self.k_usage(owner, day or usage_day()),
            self.k_bytes(owner),
            self.k_batch(batch_id or ""),
            self.k_batch_jobs(batch_id or ""),
            self.k_owner_jobs(owner),
            self.k_owner_batches(owner),
        ]
        out = await self._transition(keys=keys, args=args)
        return str(out) if out else None

    async def read_events(
        self, job_id: str, after: str = "0-0", *, block_ms: int | None = None, count: int = 100
    ) -> list[Event]:
        """Events after ``after`` (a stream id); with ``block_ms`` waits that long for new ones.

        A finished job's events come from its packed copy once its stream has lapsed, with the same
        ids, so a replay (``Last-Event-ID``) reads the same events before and after packing.
        """
        kind, found = await self._read_events(
            keys=[self.k_events(job_id), self.k_job(job_id)], args=[after, count]
        )
        if kind == "packed":
            # A finished job: whatever is not in its packed events will never come, so no waiting.
            return unpack_events(found, after, count)
        events = [_event(entry_id, flat) for entry_id, flat in found]
        if events or block_ms is None:
            return events
        reply = await self.redis.xread({self.k_events(job_id): after}, count=count, block=block_ms)
        return [_event(entry_id, fields) for _stream, entries in reply or [] for entry_id, fields in entries]

    async def incr_attempts(self, job_id: str) -> int:
        """Count one more delivery of the job; 0 when the job is gone (deleted or expired)."""
        return await self.add_attempts(job_id, 1)

    async def add_attempts(self, job_id: str, delta: int) -> int:
        """Add ``delta`` to the job's deliveries; 0, and nothing written, when the job is gone."""
        out = await self._attempts(keys=[self.k_job(job_id)], args=[delta])
        return int(out) if out else 0

    async def is_draining(self, node: str) -> bool:
        """Whether worker ``node`` is shutting down (its main process sets ``draining_key``)."""
        return bool(await self.redis.exists(draining_key(self.prefix, node)))

    # -- checkpoints and leases ------------------------------------------------------------------
    async def save_checkpoint(self, job_id: str, checkpoint: dict[str, Any]) -> None:
        """Keep the engine's state after a round, for a redelivery to resume from; only while the job
        is unfinished (a finished job's checkpoint is deleted with its last transition)."""
        text = json.dumps(checkpoint)
        owner = await self.redis.hget(self.k_job(job_id), "owner")
        if not owner:
            return
        await self._checkpoint(
            keys=[self.k_job(job_id), self.k_checkpoint(job_id), self.k_bytes(owner)],
            args=[text, self.ttl_s, len(text) + RECORD_OVERHEAD, _ACTIVE],
        )

    async def keep_alive(self, job_id: str) -> bool:
        """Restart the retention of an unfinished job (False once it has finished or is gone): the
        workers' sweep calls it so that a job waiting or running longer than ``ttl_s`` never expires."""
        keys = [self.k_job(job_id), self.k_events(job_id), self.k_checkpoint(job_id)]
        return bool(await self._keep_alive(keys=keys, args=[self.ttl_s, _ACTIVE]))

    async def load_checkpoint(self, job_id: str) -> dict[str, Any] | None:
        raw = await self.redis.get(self.k_checkpoint(job_id))
        return json.loads(raw) if raw else None

    async def acquire_lease(self, job_id: str, token: str, ttl_ms: int) -> bool:
        """Take (or renew) the job's lease; only the holder may run it, so two workers never overlap."""
        return bool(await self._lease(keys=[self.k_lease(job_id)], args=[token, str(ttl_ms)]))

    async def release_lease(self, job_id: str, token: str) -> None:
        if await self.redis.get(self.k_lease(job_id)) == token:
            await self.redis.delete(self.k_lease(job_id))

    # -- batches and owners ----------------------------------------------------------------------
    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        raw = await self.redis.hgetall(self.k_batch(batch_id))
        if not raw:
            return None
        return BatchRecord(
            batch_id=raw["batch_id"],
            owner=raw["owner"],
            total=int(raw["total"]),
            created_at=float(raw.get("created_at") or 0),
            config=json.loads(raw["config"]) if raw.get("config") else {},
        )

    async def batch_job_ids(self, batch_id: str, start: int = 0, stop: int = -1) -> list[str]:
        return list(await self.redis.lrange(self.k_batch_jobs(batch_id), start, stop))

    async def iter_batch_jobs(
        self, batch_id: str, *, chunk: int = 200, with_result: bool = False
    ) -> AsyncIterator[tuple[str, JobFull | None]]:
        """Jobs of a batch in input order, fetched ``chunk`` at a time so 10,000 items stream smoothly."""
        start = 0
        while True:
            ids = await self.batch_job_ids(batch_id, start, start + chunk - 1)
            if not ids:
                return
            for job_id, job in zip(ids, await self.get_jobs(ids, with_result=with_result), strict=True):
                yield job_id, job
            start += chunk

    async def batch_counts(self, batch_id: str) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        start = 0
        while True:
            ids = await self.batch_job_ids(batch_id, start, start + 999)
            if not ids:
                return counts
            for status in await self.job_statuses(ids):
                if status in counts:
                    counts[status] += 1
            start += 1000

    async def active_count(self, owner: str) -> int:
        return int(await self.redis.scard(self.k_active(owner)))

    async def _newest_ids(self, key: str, limit: int, before: str | None, offset: int) -> list[str] | None:
        """Up to ``limit`` ids of a listing index, newest first, after ``offset`` ids older than ``before``.

        ``None`` when ``before`` is not (or no longer) in the index: the page it came from expired.
        """
        start = offset
        if before is not None:
            rank = await self.redis.zrevrank(key, before)
            if rank is None:
                return None
            start += int(rank) + 1
        return list(await self.redis.zrevrange(key, start, start + limit - 1))

    async def _owned_page(
        self,
        key: str,
        owner: str,
        limit: int,
        before: str | None,
        fetch: Callable[[list[str]], Awaitable[list[_Listed | None]]],
    ) -> list[_Listed]:
        """The owner's records of the listing index ``key`` newest first, at most ``limit``, older than
        ``before`` when given; ``fetch`` reads the records of some ids (None where one has expired).

        Ids whose record has expired are dropped from the index as they are met, so a page is filled
        from the ids after them instead of coming back short.
        """
        out: list[_Listed] = []
        offset = 0
        while len(out) < limit:
            ids = await self._newest_ids(key, limit - len(out), before, offset)
            if not ids:
                return out
            found = await fetch(ids)
            gone = [record_id for record_id, record in zip(ids, found, strict=True) if record is None]
            out += [record for record in found if record is not None and record.owner == owner]
            offset += len(ids) - len(gone)
            if gone:
                await self.redis.zrem(key, *gone)
        return out

    async def list_jobs(self, owner: str, limit: int, before: str | None = None) -> list[JobRecord]:
        """The owner's jobs newest first, at most ``limit``, older than job ``before`` when given."""

        async def jobs(ids: list[str]) -> list[JobRecord | None]:
            return [f.job if f is not None else None for f in await self.get_jobs(ids)]

        return await self._owned_page(self.k_owner_jobs(owner), owner, limit, before, jobs)

    async def list_batches(self, owner: str, limit: int, before: str | None = None) -> list[BatchRecord]:
        """The owner's batches newest first, at most ``limit``, older than batch ``before`` when given."""

        async def batches(ids: list[str]) -> list[BatchRecord | None]:
            return [await self.get_batch(batch_id) for batch_id in ids]

        return await self._owned_page(self.k_owner_batches(owner), owner, limit, before, batches)

    async def delete_jobs(self, job_ids: Sequence[str], batch_id: str | None = None) -> None:
        """Remove jobs that were stored but could not be queued (the batch is then not accepted); a
        client's DELETE of a job or batch is ``remove_job`` / ``remove_batch`` instead."""
        owner = None
        if job_ids:
            owner = await self.redis.hget(self.k_job(job_ids[0]), "owner")
        async with self.redis.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.delete(self.k_job(job_id), self.k_events(job_id))
                # A worker that took the job already must not write it back (``restore_job``).
                pipe.hset(self.k_tombstone(job_id), mapping={"owner": owner or "", "usage_day": ""})
                pipe.expire(self.k_tombstone(job_id), self.ttl_s)
                if owner:
                    pipe.srem(self.k_active(owner), job_id)
                    pipe.zrem(self.k_owner_jobs(owner), job_id)
            if batch_id:
                pipe.delete(self.k_batch(batch_id), self.k_batch_jobs(batch_id))
                if owner:
                    pipe.zrem(self.k_owner_batches(owner), batch_id)
            await pipe.execute()


def _event(entry_id: str, fields: dict[str, str] | list[str]) -> Event:
    """An event from a stream entry: XREAD gives its fields as a mapping, a Lua reply as a flat list."""
    if isinstance(fields, list):
        fields = dict(zip(fields[::2], fields[1::2], strict=True))
    return Event(id=entry_id, type=fields.get("type", ""), data=json.loads(fields.get("data") or "{}"))

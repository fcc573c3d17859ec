"""Parley's own job store in Redis: job records, batches, checkpoints and per-job event streams.

Why not Celery's result backend: it reports an unknown task id as ``PENDING`` forever, cannot stream
progress, and knows nothing about owners, batches or checkpoints. Here an unknown id is simply absent
(the API answers 404), events live in a Redis Stream per job (stream ids are the monotonically
increasing SSE event ids), and every status change goes through one Lua script so that "completed",
"failed" and "cancelled" are reached at most once per job, with their event written in the same step.

Key layout (``prefix`` defaults to ``parley``; every key expires ``ttl_s`` after the job's last
status change)::

    {p}:job:{id}              hash   the job record (status, owner, question, config, result, ...)
    {p}:job:{id}:events       stream job.queued, pool.ready, turn.completed, ..., job.completed
    {p}:job:{id}:checkpoint   string the engine's state after the last completed round
    {p}:job:{id}:lease        string which worker runs the job now (expires unless renewed)
    {p}:batch:{id}            hash   the batch record
    {p}:batch:{id}:jobs       list   job ids in input order
    {p}:owner:{owner}:active  set    the owner's jobs that are not finished (per-key queue limits)
    {p}:owner:{owner}:jobs    zset   the owner's recent job ids by created_at (listing; trimmed)
    {p}:owner:{owner}:batches zset   the owner's recent batch ids by created_at (listing; trimmed)
    {p}:bytes:{owner}:{day}   int    bytes the owner wrote on that day (storage accounting)

Storage per key: every write the store makes for an owner (job records, events, results,
checkpoints, batches, the gateway's idempotency records) adds its size to the owner's counter of the
day it was written. Everything written expires at most ``ttl_s`` after its last write, so the sum of
the counters of the last ``ttl_s`` + one day bounds, from above, what the owner keeps in Redis: an
over-estimate (rewrites count twice), never an under-estimate, read with one MGET.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, Protocol

import redis.asyncio as aioredis
from pydantic import BaseModel, Field

JobStatus = Literal["queued", "retrieving", "debating", "completed", "failed", "cancelled"]
STATUSES: tuple[JobStatus, ...] = ("queued", "retrieving", "debating", "completed", "failed", "cancelled")
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
ACTIVE: tuple[JobStatus, ...] = ("queued", "retrieving", "debating")
TERMINAL_EVENTS = frozenset({"job.completed", "job.failed", "job.cancelled"})

# A stream per job stays small (a debate emits tens of events); the cap guards against a runaway loop.
EVENTS_MAXLEN = 10_000
# Per-record overhead counted on top of the bytes of keys and values (Redis' own structures).
RECORD_OVERHEAD = 200
# What Redis holds for one stored job beyond its fields' bytes: the hash's own structures, the event
# stream, the index entries and its queue message. Measured: 8.6 KB of used_memory per job of a
# 1,000-item batch with short questions (the fields themselves ~2.6 KB of it), so this is above it.
JOB_OVERHEAD_BYTES = 8192
DAY_S = 86400
# The per-owner listing indexes keep this many newest ids: enough for a page of recent work (one
# 10,000-item batch fits), bounded so an index never grows with a key's whole history.
OWNER_INDEX_MAX = 20_000


class JobRecord(BaseModel):
    """One debate job as stored; ``result`` is loaded separately because it carries the transcript."""

    job_id: str
    owner: str
    status: JobStatus = "queued"
    question: str
    answers: list[str] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    queue: str = ""
    batch_id: str | None = None
    index: int | None = None
    item_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    round: int = 0
    rounds: int = 0
    error: str | None = None
    worker: str | None = None
    # Daily token quota: the tokens this job reserved on its owner's ``usage_day`` at submission and
    # still holds; each LLM call's charges are drawn from it (and what a call did not use goes back),
    # so a running job holds exactly this much of the quota; the rest is released when the job
    # reaches a terminal status.
    reserved_tokens: int = 0
    usage_day: str | None = None
    # A knowledge pool the client brought (items as given); None = the retriever builds one.
    pool: list[dict[str, Any]] | None = None


class Usage(BaseModel):
    """One owner's token use on one UTC day: charged as each LLM call ends, reserved while jobs run."""

    day: str
    tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    reserved: int = 0
    jobs_completed: int = 0
    jobs_failed: int = 0
    jobs_cancelled: int = 0


def usage_day(at: float | None = None) -> str:
    """The UTC day a job's tokens are charged to (the day it was submitted)."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if at is None else at))


class BatchRecord(BaseModel):
    batch_id: str
    owner: str
    total: int
    created_at: float = 0.0
    config: dict[str, Any] = Field(default_factory=dict)


class Event(BaseModel):
    id: str
    type: str
    data: dict[str, Any]


def storage_key(prefix: str, owner: str, at: float | None = None) -> str:
    """The counter of the bytes ``owner`` wrote on the UTC day of ``at`` (now by default)."""
    day = int((time.time() if at is None else at) // DAY_S)
    return f"{prefix}:bytes:{owner}:{day}"


def stored_size(jobs: Sequence[JobRecord], batch: BatchRecord | None = None) -> int:
    """What storing ``jobs`` (and ``batch``) writes: the bytes of their fields, ids and first event."""
    total = 0
    for job in jobs:
        fields = job.model_dump(exclude_none=True)
        total += sum(len(k) + len(_dump(v).encode()) for k, v in fields.items())
        total += JOB_OVERHEAD_BYTES
    if batch is not None:
        total += len(_dump(batch.config).encode()) + RECORD_OVERHEAD
    return total


def draining_key(prefix: str, node: str) -> str:
    """Set while Celery node ``node`` shuts down: its running jobs hand themselves back to the queue."""
    return f"{prefix}:draining:{node}"


def new_id(kind: str) -> str:
    """Opaque, unguessable ids (``job_…``/``bat_…``); guessing another key's id must not be practical."""
    return f"{kind}_{uuid.uuid4().hex}"


class JobStore(Protocol):
    """What the API and the workers need from the job store (``RedisJobStore`` implements it)."""

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...

    async def create_jobs(self, jobs: Sequence[JobRecord], batch: BatchRecord | None = None) -> None: ...

    async def delete_jobs(self, job_ids: Sequence[str], batch_id: str | None = None) -> None: ...

    async def get_job(self, job_id: str) -> JobRecord | None: ...

    async def get_jobs(
        self, job_ids: Sequence[str], *, with_result: bool = False
    ) -> list[JobFull | None]: ...

    async def transition(
        self,
        job_id: str,
        to: JobStatus,
        allowed_from: Sequence[str],
        *,
        event: str | None = None,
        data: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> bool: ...

    async def emit(self, job_id: str, event: str, data: dict[str, Any]) -> str | None: ...

    async def set_fields(self, job_id: str, fields: dict[str, Any]) -> bool: ...

    async def read_events(
        self, job_id: str, after: str = "0-0", *, block_ms: int | None = None, count: int = 100
    ) -> list[Event]: ...

    async def incr_attempts(self, job_id: str) -> int: ...

    async def add_attempts(self, job_id: str, delta: int) -> int: ...

    async def is_draining(self, node: str) -> bool: ...

    async def save_checkpoint(self, job_id: str, checkpoint: dict[str, Any]) -> None: ...

    async def load_checkpoint(self, job_id: str) -> dict[str, Any] | None: ...

    async def acquire_lease(self, job_id: str, token: str, ttl_ms: int) -> bool: ...

    async def release_lease(self, job_id: str, token: str) -> None: ...

    async def get_batch(self, batch_id: str) -> BatchRecord | None: ...

    def iter_batch_jobs(
        self, batch_id: str, *, chunk: int = 200, with_result: bool = False
    ) -> AsyncIterator[tuple[str, JobFull | None]]: ...

    async def batch_counts(self, batch_id: str) -> dict[str, int]: ...

    async def active_count(self, owner: str) -> int: ...

    async def reserve_tokens(self, owner: str, day: str, amount: int, quota: int | None) -> Usage | None: ...

    async def release_tokens(self, owner: str, day: str, amount: int) -> None: ...

    async def charge(
        self, job_id: str, prompt_tokens: int, completion_tokens: int, calls: int = 1
    ) -> bool: ...

    async def spent(self, job_id: str) -> tuple[int, int]: ...

    async def usage(self, owner: str, day: str) -> Usage: ...

    async def stored_bytes(self, owner: str) -> tuple[int, int]: ...

    async def list_jobs(self, owner: str, limit: int, before: str | None = None) -> list[JobRecord]: ...

    async def list_batches(self, owner: str, limit: int, before: str | None = None) -> list[BatchRecord]: ...


def _dump(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


# KEYS: job hash, events stream, owner-active set, checkpoint, lease, owner's usage hash of the day,
#       owner's storage counter of today.
# ARGV: to-status ('' = keep), allowed-from (comma list), event type ('' = none), event data,
#       now, ttl seconds, job id, then field/value pairs.
# Returns the event id (or "ok" when no event), or false when the job is missing or the transition
# is not allowed from its current status.
_TRANSITION_LUA = """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return false end
if not string.find(',' .. ARGV[2] .. ',', ',' .. cur .. ',', 1, true) then return false end
local to = ARGV[1]
if to ~= '' then
  redis.call('HSET', KEYS[1], 'status', to, 'updated_at', ARGV[5])
end
for i = 8, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
local out = 'ok'
if ARGV[3] ~= '' then
  out = redis.call('XADD', KEYS[2], 'MAXLEN', '~', '10000', '*', 'type', ARGV[3], 'data', ARGV[4])
end
local ttl = tonumber(ARGV[6])
if to == 'completed' or to == 'failed' or to == 'cancelled' then
  redis.call('SREM', KEYS[3], ARGV[7])
  redis.call('HSET', KEYS[1], 'finished_at', ARGV[5])
  redis.call('DEL', KEYS[5])
  -- The tokens it used were charged call by call (_CHARGE_LUA); what is left of its reservation
  -- is given back here, exactly once (terminal states are never left).
  -- Nothing is drawn from it any more either, so a call settling later gives nothing back to it.
  local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved_tokens') or '0') or 0
  if reserved > 0 then
    redis.call('HINCRBY', KEYS[6], 'reserved', -reserved)
  end
  redis.call('HSET', KEYS[1], 'reserved_tokens', '0', 'drawn_tokens', '0')
  redis.call('HINCRBY', KEYS[6], 'jobs_' .. to, 1)
  redis.call('EXPIRE', KEYS[6], 8 * 86400)
end
if to ~= '' and ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[4], ttl)
end
-- Storage accounting: the bytes this step wrote, on the owner's counter of the day.
local written = 0
if ARGV[3] ~= '' then written = written + #ARGV[4] + 64 end
for i = 8, #ARGV, 2 do
  written = written + #ARGV[i] + #ARGV[i + 1]
end
if written > 0 then
  redis.call('INCRBY', KEYS[7], written)
  redis.call('EXPIRE', KEYS[7], ttl + 86400)
end
return out
"""

# KEYS: job hash, the owner's usage hash of the job's day. ARGV: prompt tokens, completion tokens,
# calls (deltas, possibly negative). Charges an LLM call to the job and its owner's day whatever the
# job's status (a cancelled job's calls in flight are charged too): the worst case before the call is
# sent, the difference to the real use when it ends.
# A running job holds exactly its reservation of the owner's quota, never more: what a charge adds
# is drawn from the job's reservation (``drawn_tokens`` records how much), and what a refund or a
# settlement takes off goes back to it, once the tokens charged beyond the reservation (a job with
# no budget reserves nothing) are paid back. A terminal status releases the reservation and clears
# what was drawn (the transition above), so nothing goes back to it after that.
_CHARGE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local p = tonumber(ARGV[1])
local c = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local t = p + c
local job = redis.call('HMGET', KEYS[1], 'used_tokens', 'drawn_tokens', 'reserved_tokens')
local used = tonumber(job[1] or '0') or 0
local drawn = tonumber(job[2] or '0') or 0
local reserved = tonumber(job[3] or '0') or 0
for _, pair in ipairs({{'tokens', t}, {'prompt_tokens', p}, {'completion_tokens', c}, {'calls', n}}) do
  redis.call('HINCRBY', KEYS[1], 'used_' .. pair[1], pair[2])
  redis.call('HINCRBY', KEYS[2], pair[1], pair[2])
end
local move = 0
if t > 0 then
  move = math.min(reserved, t)
else
  move = -math.min(drawn, math.max(0, -t - (used - drawn)))
end
if move ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'reserved_tokens', -move)
  redis.call('HINCRBY', KEYS[1], 'drawn_tokens', move)
  redis.call('HINCRBY', KEYS[2], 'reserved', -move)
end
redis.call('EXPIRE', KEYS[2], 8 * 86400)
return 1
"""

# KEYS: usage hash. ARGV: tokens to reserve, quota (0 = none). Reserves only if used + reserved +
# the new reservation stay within the quota; 1 when reserved, 0 when refused.
_RESERVE_LUA = """
local quota = tonumber(ARGV[2])
local amount = tonumber(ARGV[1])
if quota > 0 then
  local used = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0') or 0
  local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0') or 0
  if used + reserved + amount > quota then return 0 end
end
redis.call('HINCRBY', KEYS[1], 'reserved', amount)
redis.call('EXPIRE', KEYS[1], 8 * 86400)
return 1
"""

# KEYS: lease. ARGV: token, ttl ms. Takes a free lease or renews our own; false if another holds it.
_LEASE_LUA = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


class RedisJobStore:
    """The ``JobStore`` on Redis. Pass an existing ``redis.asyncio.Redis`` (tests) or a URL."""

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        prefix: str = "parley",
        ttl_s: int = 7 * 24 * 3600,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_s = ttl_s
        self._transition = redis.register_script(_TRANSITION_LUA)
        self._lease = redis.register_script(_LEASE_LUA)
        self._reserve = redis.register_script(_RESERVE_LUA)
        self._charge = redis.register_script(_CHARGE_LUA)

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "parley", ttl_s: int = 7 * 24 * 3600, timeout_s: float = 5.0
    ) -> RedisJobStore:
        """A store with its own connection pool; short socket timeouts so a dead Redis fails fast."""
        client = aioredis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=timeout_s,
            socket_timeout=None,  # blocking XREAD for SSE must be allowed to wait
            health_check_interval=30,
        )
        return cls(client, prefix=prefix, ttl_s=ttl_s)

    async def aclose(self) -> None:
        await self.redis.aclose()  # type: ignore[attr-defined]  # stubs predate redis 5

    # -- keys ------------------------------------------------------------------------------------
    def k_job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def k_events(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:events"

    def k_checkpoint(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:checkpoint"

    def k_lease(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:lease"

    def k_batch(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}"

    def k_batch_jobs(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:jobs"

    def k_active(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner}:active"

    def k_usage(self, owner: str, day: str) -> str:
        return f"{self.prefix}:usage:{owner}:{day}"

    def k_owner_jobs(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner}:jobs"

    def k_owner_batches(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner}:batches"

    def k_bytes(self, owner: str, at: float | None = None) -> str:
        return storage_key(self.prefix, owner, at)

    # -- basics ----------------------------------------------------------------------------------
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
                        "config": _dump(batch.config),
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
                    k: _dump(v) for k, v in record.model_dump().items() if v is not None
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
        return _parse_job(raw) if raw else None

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
            result = raw.get("result") if with_result else None
            out.append(JobFull(_parse_job(raw), result or None))
        return out

    async def job_statuses(self, job_ids: Sequence[str]) -> list[str | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hget(self.k_job(job_id), "status")
            return list(await pipe.execute())

    async def get_result(self, job_id: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(self.k_job(job_id), "result")
        return json.loads(raw) if raw else None

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
        and the terminal states are never left.
        """
        return await self._run_transition(job_id, to, allowed_from, event, data, fields) is not None

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
        owner, day = await self.redis.hmget(self.k_job(job_id), ["owner", "usage_day"])
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
            args += [key, _dump(value)]
        keys = [
            self.k_job(job_id),
            self.k_events(job_id),
            self.k_active(owner),
            self.k_checkpoint(job_id),
            self.k_lease(job_id),
            self.k_usage(owner, day or usage_day()),
            self.k_bytes(owner),
        ]
        out = await self._transition(keys=keys, args=args)
        return str(out) if out else None

    async def read_events(
        self, job_id: str, after: str = "0-0", *, block_ms: int | None = None, count: int = 100
    ) -> list[Event]:
        """Events after ``after`` (a stream id); with ``block_ms`` waits that long for new ones."""
        reply = await self.redis.xread({self.k_events(job_id): after}, count=count, block=block_ms)
        events: list[Event] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                events.append(
                    Event(
                        id=entry_id, type=fields.get("type", ""), data=json.loads(fields.get("data") or "{}")
                    )
                )
        return events

    async def incr_attempts(self, job_id: str) -> int:
        return int(await self.redis.hincrby(self.k_job(job_id), "attempts", 1))

    async def add_attempts(self, job_id: str, delta: int) -> int:
        return int(await self.redis.hincrby(self.k_job(job_id), "attempts", delta))

    async def is_draining(self, node: str) -> bool:
        """Whether worker ``node`` is shutting down (its main process sets ``draining_key``)."""
        return bool(await self.redis.exists(draining_key(self.prefix, node)))

    # -- checkpoints and leases ------------------------------------------------------------------
    async def save_checkpoint(self, job_id: str, checkpoint: dict[str, Any]) -> None:
        text = json.dumps(checkpoint)
        owner = await self.redis.hget(self.k_job(job_id), "owner")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.k_checkpoint(job_id), text, ex=self.ttl_s)
            if owner:
                pipe.incrby(self.k_bytes(owner), len(text) + RECORD_OVERHEAD)
                pipe.expire(self.k_bytes(owner), self.ttl_s + DAY_S)
            await pipe.execute()

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

    # -- daily token quotas ----------------------------------------------------------------------
    async def reserve_tokens(self, owner: str, day: str, amount: int, quota: int | None) -> Usage | None:
        """Reserve ``amount`` tokens of the owner's day; None (nothing reserved) if the quota is short.

        Atomic, so two submissions racing for the last of a quota cannot both get it.
        """
        ok = await self._reserve(keys=[self.k_usage(owner, day)], args=[amount, quota or 0])
        return None if not int(ok) else await self.usage(owner, day)

    async def charge(self, job_id: str, prompt_tokens: int, completion_tokens: int, calls: int = 1) -> bool:
        """Charge a change in what the job's LLM calls cost (``Spend``) to the job and its owner's
        day, drawn from (or given back to) the job's reservation. False if the job record is gone.
        Called around every call, so cancelled, failed and resumed work is charged too."""
        owner, day = await self.redis.hmget(self.k_job(job_id), ["owner", "usage_day"])
        if owner is None:
            return False
        keys = [self.k_job(job_id), self.k_usage(owner, day or usage_day())]
        return bool(await self._charge(keys=keys, args=[prompt_tokens, completion_tokens, calls]))

    async def spent(self, job_id: str) -> tuple[int, int]:
        """(calls, tokens) charged to the job so far: where a resumed job's budget starts."""
        calls, tokens = await self.redis.hmget(self.k_job(job_id), ["used_calls", "used_tokens"])
        return int(calls or 0), int(tokens or 0)

    async def release_tokens(self, owner: str, day: str, amount: int) -> None:
        """Give back a reservation whose jobs were never queued."""
        await self.redis.hincrby(self.k_usage(owner, day), "reserved", -amount)

    async def stored_bytes(self, owner: str) -> tuple[int, int]:
        """(bytes, seconds until the oldest counted day drops out): what ``owner`` keeps in Redis,
        bounded from above by its writes of the last ``ttl_s`` + one day."""
        now = time.time()
        days = -(-self.ttl_s // DAY_S) + 1
        keys = [self.k_bytes(owner, now - d * DAY_S) for d in range(days + 1)]
        values = await self.redis.mget(keys)
        total = sum(int(v or 0) for v in values)
        oldest = max((d for d, v in enumerate(values) if v), default=0)
        ttl = await self.redis.ttl(keys[oldest]) if total else 0
        return total, max(1, int(ttl))

    async def usage(self, owner: str, day: str) -> Usage:
        raw = await self.redis.hgetall(self.k_usage(owner, day))
        return Usage(day=day, **{k: int(v) for k, v in raw.items() if k in Usage.model_fields})

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

    async def list_jobs(self, owner: str, limit: int, before: str | None = None) -> list[JobRecord]:
        """The owner's jobs newest first, at most ``limit``, older than job ``before`` when given.

        Ids whose record has expired are dropped from the index as they are met, so a page is filled
        from the ids after them instead of coming back short.
        """
        key = self.k_owner_jobs(owner)
        out: list[JobRecord] = []
        offset = 0
        while len(out) < limit:
            ids = await self._newest_ids(key, limit - len(out), before, offset)
            if not ids:
                return out
            found = await self.get_jobs(ids)
            gone = [job_id for job_id, f in zip(ids, found, strict=True) if f is None]
            out += [f.job for f in found if f is not None and f.job.owner == owner]
            offset += len(ids) - len(gone)
            if gone:
                await self.redis.zrem(key, *gone)
        return out

    async def list_batches(self, owner: str, limit: int, before: str | None = None) -> list[BatchRecord]:
        """The owner's batches newest first, at most ``limit``, older than batch ``before`` when given."""
        key = self.k_owner_batches(owner)
        out: list[BatchRecord] = []
        offset = 0
        while len(out) < limit:
            ids = await self._newest_ids(key, limit - len(out), before, offset)
            if not ids:
                return out
            gone = []
            for batch_id in ids:
                batch = await self.get_batch(batch_id)
                if batch is None:
                    gone.append(batch_id)
                elif batch.owner == owner:
                    out.append(batch)
            offset += len(ids) - len(gone)
            if gone:
                await self.redis.zrem(key, *gone)
        return out

    async def delete_jobs(self, job_ids: Sequence[str], batch_id: str | None = None) -> None:
        """Remove jobs that were stored but could not be queued (the batch is then not accepted)."""
        owner = None
        if job_ids:
            owner = await self.redis.hget(self.k_job(job_ids[0]), "owner")
        async with self.redis.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.delete(self.k_job(job_id), self.k_events(job_id))
                if owner:
                    pipe.srem(self.k_active(owner), job_id)
                    pipe.zrem(self.k_owner_jobs(owner), job_id)
            if batch_id:
                pipe.delete(self.k_batch(batch_id), self.k_batch_jobs(batch_id))
                if owner:
                    pipe.zrem(self.k_owner_batches(owner), batch_id)
            await pipe.execute()


class JobFull:
    """A job record with its result as stored (JSON text; ``None`` until completed).

    The API splices ``result_json`` into responses as is: parsing and re-serialising a transcript on
    every poll would cost more than everything else a ``GET`` does.
    """

    __slots__ = ("job", "result_json")

    def __init__(self, job: JobRecord, result_json: str | None) -> None:
        self.job = job
        self.result_json = result_json

    @property
    def result(self) -> dict[str, Any] | None:
        return json.loads(self.result_json) if self.result_json else None


def _parse_job(raw: dict[str, str]) -> JobRecord:
    def opt_float(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if v else None

    def opt_int(key: str) -> int | None:
        v = raw.get(key)
        return int(v) if v else None

    return JobRecord(
        job_id=raw["job_id"],
        owner=raw["owner"],
        status=raw["status"],
        question=raw.get("question", ""),
        answers=json.loads(raw["answers"]) if raw.get("answers") else None,
        config=json.loads(raw["config"]) if raw.get("config") else {},
        queue=raw.get("queue", ""),
        batch_id=raw.get("batch_id") or None,
        index=opt_int("index"),
        item_id=raw.get("item_id") or None,
        created_at=float(raw.get("created_at") or 0),
        updated_at=float(raw.get("updated_at") or 0),
        started_at=opt_float("started_at"),
        finished_at=opt_float("finished_at"),
        attempts=int(raw.get("attempts") or 0),
        round=int(raw.get("round") or 0),
        rounds=int(raw.get("rounds") or 0),
        error=raw.get("error") or None,
        worker=raw.get("worker") or None,
        reserved_tokens=int(raw.get("reserved_tokens") or 0),
        usage_day=raw.get("usage_day") or None,
        pool=json.loads(raw["pool"]) if raw.get("pool") else None,
    )

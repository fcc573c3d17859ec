"""Caps on open event streams (SSE): per API process in memory, per key in Redis across replicas.

A stream holds one connection of the SSE Redis pool (its blocking ``XREAD``) for as long as it is
open, so the per-process cap is also that pool's size, and streams never take connections from the
pool that serves requests. The per-key count lives in a sorted set per key whose members are the open
streams, scored by when their slot lapses: a living stream renews its slot every third of
``slot_ttl_s``, an ending stream removes it, and the slots of a process that crashed lapse on their own
and are swept by the next stream that opens, so a crash never leaks a key's slots for good.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import EqualJitterBackoff
from sse_starlette.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from api.problems import Problem
from api.settings import ApiSettings
from services.jobstore import TERMINAL, TERMINAL_EVENTS, JobStore
from services.metrics import REFUSALS

log = logging.getLogger("parley.api")


def _retry_once() -> Retry:
    # One quick retry covers a connection Redis dropped (a restart); more would only stretch a hang.
    return Retry(EqualJitterBackoff(cap=0.5, base=0.05), retries=1)


def request_redis(settings: ApiSettings) -> aioredis.Redis:
    """The pool that serves requests: every call times out after ``redis_timeout_s``, so a hung Redis
    answers 503 instead of holding the request; a burst of requests beyond the pool's size waits (as
    long) for a connection instead of failing at once."""
    timeout = settings.redis_timeout_s
    pool: aioredis.BlockingConnectionPool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        timeout=timeout,
        decode_responses=True,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        health_check_interval=30,
        retry=_retry_once(),
    )
    return aioredis.Redis.from_pool(pool)  # type: ignore[attr-defined]  # stubs predate redis 5


def stream_redis(settings: ApiSettings) -> aioredis.Redis:
    """The event streams' own pool, one connection per stream up to the per-process cap; its socket
    timeout lies above the blocking read's ``sse_block_ms``."""
    timeout = settings.redis_timeout_s
    pool: aioredis.BlockingConnectionPool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.max_streams_per_process,
        timeout=timeout,
        decode_responses=True,
        socket_connect_timeout=timeout,
        socket_timeout=settings.sse_block_ms / 1000 + timeout,
        health_check_interval=30,
        retry=_retry_once(),
    )
    return aioredis.Redis.from_pool(pool)  # type: ignore[attr-defined]  # stubs predate redis 5


# KEYS: the key's stream set. ARGV: now, cap, this stream's lapse time, its member, set TTL (ms).
# Returns 1 when the slot was taken, 0 when the key already has ``cap`` living streams.
_ACQUIRE_LUA = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


@dataclass
class StreamSlot:
    owner: str
    member: str


class StreamSlots:
    """Hands out stream slots; ``acquire`` raises a 429 problem with ``Retry-After`` past either cap."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        *,
        per_key: int,
        per_process: int,
        slot_ttl_s: float,
        retry_after_s: int,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self.per_key = per_key
        self.per_process = per_process
        self.slot_ttl_s = slot_ttl_s
        self._retry_after = str(retry_after_s)
        self._acquire = redis.register_script(_ACQUIRE_LUA)
        self.open = 0

    def _key(self, owner: str) -> str:
        return f"{self._prefix}:streams:{owner}"

    def _refused(self, detail: str, owner: str) -> Problem:
        REFUSALS.labels("streams", owner).inc()
        return Problem(
            429, detail, type_="/problems/too-many-streams", headers={"Retry-After": self._retry_after}
        )

    async def acquire(self, owner: str) -> StreamSlot:
        if self.open >= self.per_process:
            raise self._refused(
                f"this server has {self.open} open event streams, its limit; reconnect later", owner
            )
        self.open += 1
        slot = StreamSlot(owner, uuid.uuid4().hex)
        try:
            now = time.time()
            taken = await self._acquire(
                keys=[self._key(owner)],
                args=[now, self.per_key, now + self.slot_ttl_s, slot.member, int(self.slot_ttl_s * 2000)],
            )
        except BaseException:
            self.open -= 1
            raise
        if not taken:
            self.open -= 1
            raise self._refused(
                f"this key has {self.per_key} open event streams, its limit; close one or reconnect later",
                owner,
            )
        return slot

    async def renew(self, slot: StreamSlot) -> None:
        """Push the slot's lapse time on (and re-add it if it had lapsed while this stream was stuck)."""
        key = self._key(slot.owner)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {slot.member: time.time() + self.slot_ttl_s})
            pipe.pexpire(key, int(self.slot_ttl_s * 2000))
            await pipe.execute()

    async def release(self, slot: StreamSlot) -> None:
        """Give the slot back; never raises (a slot Redis could not remove lapses by itself)."""
        self.open -= 1
        try:
            await self._redis.zrem(self._key(slot.owner), slot.member)
        except Exception as exc:
            log.warning("could not release a stream slot of %s (it lapses by itself): %s", slot.owner, exc)


class SlottedEventSource(EventSourceResponse):
    """An ``EventSourceResponse`` that renews its stream slot while it runs and releases it at the end,
    however the stream ends (finished job, client gone, server shutting down, error)."""

    def __init__(self, *args: object, slots: StreamSlots, slot: StreamSlot, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._slots = slots
        self._slot = slot

    async def _keep_slot(self) -> None:
        while True:
            await anyio.sleep(self._slots.slot_ttl_s / 3)
            try:
                await self._slots.renew(self._slot)
            except Exception as exc:
                log.warning("could not renew a stream slot of %s: %s", self._slot.owner, exc)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        keeper = asyncio.create_task(self._keep_slot())
        try:
            await super().__call__(scope, receive, send)
        finally:
            keeper.cancel()
            with anyio.CancelScope(shield=True):
                await self._slots.release(self._slot)


def valid_stream_id(value: str) -> bool:
    """Whether ``value`` is a Redis stream id (``ms`` or ``ms-seq``), the only ``Last-Event-ID`` we issue."""
    head, _, tail = value.partition("-")
    return head.isdigit() and (tail == "" or tail.isdigit())


async def job_events(
    store: JobStore,
    job_id: str,
    start: str,
    *,
    block_ms: int,
    disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[dict[str, str]]:
    """A job's events after ``start`` as SSE fields, ending after its terminal event (or when the job
    is already finished or gone, or the client left)."""
    cursor = start
    while True:
        events = await store.read_events(job_id, cursor, block_ms=block_ms)
        for ev in events:
            cursor = ev.id
            yield {"id": ev.id, "event": ev.type, "data": json.dumps(ev.data)}
            if ev.type in TERMINAL_EVENTS:
                return
        if not events:
            job = await store.get_job(job_id)
            if job is None or job.status in TERMINAL:
                # Resumed after the terminal event (or the job expired): nothing more will come.
                return
            if await disconnected():
                return

"""Event streams: the one reader of a job's events (``JobEventReader``) and the caps on open streams.

Caps on open event streams (SSE): per API process in memory, per key in Redis across replicas.

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
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import anyio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import EqualJitterBackoff
from redis.commands.core import AsyncScript
from sse_starlette.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from api.errors import TooManyStreams
from api.settings import ApiSettings
from services.jobstore import TERMINAL, TERMINAL_EVENTS, Event, JobStore
from services.observability.metrics import REFUSALS
from services.redis_connect import async_client

log = logging.getLogger("parley.api")


def _retry_once() -> Retry:
    # One quick retry covers a connection Redis dropped (a restart); more would only stretch a hang.
    return Retry(EqualJitterBackoff(cap=0.5, base=0.05), retries=1)


def request_redis(settings: ApiSettings) -> aioredis.Redis:
    """The pool that serves requests: every call times out after ``redis_timeout_s``, so a hung Redis
    answers 503 instead of holding the request; a burst of requests beyond the pool's size waits (as
    long) for a connection instead of failing at once."""
    return _blocking_redis(settings, settings.redis_max_connections, settings.redis_timeout_s)


def stream_redis(settings: ApiSettings) -> aioredis.Redis:
    """The event streams' own pool, one connection per stream up to the per-process cap; its socket
    timeout lies above the blocking read's ``sse_block_ms``."""
    socket_timeout = settings.sse_block_ms / 1000 + settings.redis_timeout_s
    return _blocking_redis(settings, settings.max_streams_per_process, socket_timeout)


def _blocking_redis(settings: ApiSettings, max_connections: int, socket_timeout: float) -> aioredis.Redis:
    """A client over a blocking pool of ``max_connections``: waiting for a connection and connecting
    time out after ``redis_timeout_s``, each call after ``socket_timeout``."""
    timeout = settings.redis_timeout_s
    return async_client(
        settings.redis_spec(),
        blocking_timeout_s=timeout,
        max_connections=max_connections,
        decode_responses=True,
        socket_connect_timeout=timeout,
        socket_timeout=socket_timeout,
        health_check_interval=30,
        retry=_retry_once(),
    )


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


@dataclass(eq=False)
class StreamSlots:
    """Hands out stream slots; ``acquire`` raises ``TooManyStreams`` (with a wait) past either cap."""

    redis: aioredis.Redis
    prefix: str
    _: KW_ONLY
    per_key: int
    per_process: int
    slot_ttl_s: float
    retry_after_s: int
    open: int = field(init=False, default=0)  # the event streams this process holds now
    _acquire: AsyncScript = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._acquire = self.redis.register_script(_ACQUIRE_LUA)

    def _key(self, owner: str) -> str:
        return f"{self.prefix}:streams:{owner}"

    def _refused(self, detail: str, owner: str) -> TooManyStreams:
        REFUSALS.labels("streams", owner).inc()
        return TooManyStreams(detail, retry_after_s=self.retry_after_s)

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
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {slot.member: time.time() + self.slot_ttl_s})
            pipe.pexpire(key, int(self.slot_ttl_s * 2000))
            await pipe.execute()

    async def release(self, slot: StreamSlot) -> None:
        """Give the slot back; never raises (a slot Redis could not remove lapses by itself)."""
        self.open -= 1
        try:
            await self.redis.zrem(self._key(slot.owner), slot.member)
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


# An event id as this API issues it: a Redis stream id, ``ms-seq`` (or ``ms``), each part a 64-bit
# number; at most 19 digits each keeps any value the schema allows within what Redis reads.
EVENT_ID_PATTERN = r"^[0-9]{1,19}(-[0-9]{1,19})?$"


@dataclass(eq=False)
class JobEventReader:
    """The one reader of a job's event stream: the SSE route, the OpenAI-compatible stream and its
    blocking wait all follow a job through it (and MCP progress arrives over the SSE route).

    ``events()`` yields the events after ``start`` and ends after the terminal event, when the job is
    already finished or gone, or when ``disconnected`` says the client left (``client_left``).
    ``outcome`` is then the job's terminal status (None if the job is gone or the client left).
    ``between`` runs after every read (a stream renews its slot there).
    """

    store: JobStore
    job_id: str
    start: str = "0-0"
    _: KW_ONLY
    block_ms: int
    disconnected: Callable[[], Awaitable[bool]] | None = None
    between: Callable[[], Awaitable[None]] | None = None
    outcome: str | None = field(init=False, default=None)
    client_left: bool = field(init=False, default=False)

    async def events(self) -> AsyncIterator[Event]:
        cursor = self.start
        while True:
            events = await self.store.read_events(self.job_id, cursor, block_ms=self.block_ms)
            for ev in events:
                cursor = ev.id
                yield ev
                if ev.type in TERMINAL_EVENTS:
                    self.outcome = ev.type.removeprefix("job.")
                    return
            if not events:
                job = await self.store.get_job(self.job_id)
                if job is None or job.status in TERMINAL:
                    # Resumed after the terminal event (or the job expired): nothing more will come.
                    self.outcome = job.status if job is not None else None
                    return
                if self.disconnected is not None and await self.disconnected():
                    self.client_left = True
                    return
            if self.between is not None:
                await self.between()


def sse_fields(events: AsyncIterator[Event]) -> AsyncIterator[dict[str, str]]:
    """Events as the fields of Server-Sent Events (``id``, ``event``, ``data``)."""

    async def fields() -> AsyncIterator[dict[str, str]]:
        async for ev in events:
            yield {"id": ev.id, "event": ev.type, "data": json.dumps(ev.data)}

    return fields()


class CancellingEventSource(SlottedEventSource):
    """An event stream that runs ``on_end`` however it ends: after a finished job that is a no-op,
    after a client that went away it cancels the job nobody is waiting for any more."""

    def __init__(self, *args: Any, on_end: Callable[[], Awaitable[object]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await asyncio.wait_for(self._on_end(), timeout=5)
                except Exception as exc:  # the store may be down; the sweeper ends orphaned jobs
                    log.warning("could not cancel the job of a closed chat completion: %s", exc)

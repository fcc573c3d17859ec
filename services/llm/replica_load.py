"""Calls in flight per LLM replica, shared by the worker processes of a deployment through Redis.

Each process sees its own calls in flight at once; what the *other* processes have in flight at a
replica it can only learn from them. ``RedisReplicaLoad`` (a ``services.llm.replicas.SharedReplicaLoad``)
keeps one Redis hash for that: each process writes its counts there (one field per URL it has calls
at) with an expiry time of its own, and reads everyone else's in the same script call, so the
replica set of each process chooses by the load of all of them.

Nothing here ever holds up or fails an LLM call: a background thread (one per process, started on
first use, again after a fork) does the Redis work; ``publish`` only hands it the new counts and
``others`` only returns what it last read. The thread syncs when this process's counts change
(coalesced) and every ``refresh_s`` while the process is active (it published or read in the last
10 s). A process that dies leaves its counts behind for at most ``ttl_s``: every sync drops the
fields of processes whose expiry passed (the whole hash expires when nobody renews it). While Redis
is unreachable, or the last successful read is older than ten refreshes (or ``ttl_s``), ``others``
returns None and the process decides by its own counts, as without sharing; the thread retries
every second.

One hash holds every process's fields, so a sync reads processes x URLs fields: meant for the tens of
worker processes of a deployment, not thousands.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from services.redis_connect import RedisSpec, sync_client

log = logging.getLogger("parley.replicas")

# KEYS[1]: the hash. ARGV[1]: this process's id; ARGV[2]: TTL in ms; then URL, count pairs: its calls
# in flight (zeros left out). Fields: "<process>" = its expiry time (ms, Redis's clock), "<process>|<url>"
# = its calls in flight there. Drops expired processes' fields and this process's old counts, writes
# its new ones, renews its expiry, and returns the other live processes' totals as URL, count pairs.
SYNC_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[1]
local ttl = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local alive = {}
for i = 1, #all, 2 do
  local f = all[i]
  if not string.find(f, '|', 1, true) and f ~= me and tonumber(all[i + 1]) >= now then
    alive[f] = true
  end
end
local drop = {}
local totals = {}
for i = 1, #all, 2 do
  local f = all[i]
  local sep = string.find(f, '|', 1, true)
  if sep then
    local p = string.sub(f, 1, sep - 1)
    if alive[p] then
      local u = string.sub(f, sep + 1)
      totals[u] = (totals[u] or 0) + (tonumber(all[i + 1]) or 0)
    else
      drop[#drop + 1] = f
    end
  elseif not alive[f] and f ~= me then
    drop[#drop + 1] = f
  end
end
for i = 1, #drop, 500 do
  redis.call('HDEL', KEYS[1], unpack(drop, i, math.min(i + 499, #drop)))
end
redis.call('HSET', KEYS[1], me, now + ttl)
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], me .. '|' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
local out = {}
for u, n in pairs(totals) do
  if n > 0 then
    out[#out + 1] = u
    out[#out + 1] = tostring(n)
  end
end
return out
"""

# A process with nothing in flight that neither published nor read for this long stops the periodic
# sync (its entry lapses); its next call wakes the thread again.
IDLE_AFTER_S = 10.0

# Pause between tries while Redis is unreachable.
RETRY_S = 1.0


class _Live:
    """The per-process part: the thread, its Redis client and what it last read."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.process = f"{socket.gethostname()}:{self.pid}:{uuid.uuid4().hex[:8]}".replace("|", "_")
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.mine: dict[str, int] = {}
        self.dirty = False
        self.active_at = float("-inf")  # when this process last published or read
        self.others: dict[str, int] | None = None
        self.read_at: float | None = None
        self.failing = False
        self.thread: threading.Thread | None = None


class RedisReplicaLoad:
    """A ``SharedReplicaLoad`` in one Redis hash (see the module docstring).

    ``client_factory`` makes the thread's Redis client (a test can point it anywhere); by default
    one from ``redis_url`` with sub-second timeouts, since a slow store only delays the thread."""

    def __init__(
        self,
        redis_url: str | RedisSpec | None = None,
        *,
        key: str = "parley:replica-load",
        ttl_s: float = 3.0,
        refresh_s: float = 0.1,
        client_factory: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if redis_url is None and client_factory is None:
            raise ValueError("RedisReplicaLoad needs a redis_url or a client_factory")
        self.key = key
        self.ttl_s = ttl_s
        self.refresh_s = refresh_s
        # A view older than this is not used: the thread is failing, or was idle until now.
        self.stale_s = min(ttl_s, 10 * refresh_s)
        self._redis_spec = RedisSpec("redis_url", redis_url) if isinstance(redis_url, str) else redis_url
        self._client_factory = client_factory
        self._clock = clock
        self._live: _Live | None = None
        self._start_lock = threading.Lock()
        ref = weakref.ref(self)

        def after_fork() -> None:  # a lock held by a parent's thread at fork time stays held
            me = ref()
            if me is not None:
                me._start_lock = threading.Lock()
                me._live = None

        os.register_at_fork(after_in_child=after_fork)

    # -- SharedReplicaLoad ---------------------------------------------------------------------
    def publish(self, counts: Mapping[str, int]) -> None:
        """This process's calls in flight per URL are now ``counts`` (handed to the thread)."""
        live = self._ensure()
        with live.lock:
            live.mine = {u: n for u, n in counts.items() if n > 0}
            live.dirty = True
            live.active_at = self._clock()
        live.wake.set()

    def others(self) -> Mapping[str, int] | None:
        """The other live processes' calls in flight per URL as last read, or None when the last
        read failed or is older than ``stale_s`` (then a sync is asked for)."""
        live = self._ensure()
        with live.lock:
            now = self._clock()
            live.active_at = now
            fresh = live.read_at is not None and now - live.read_at <= self.stale_s
            view = live.others if fresh else None
        if view is None:
            live.wake.set()
        return view

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the thread and remove this process's counts (best effort; they lapse anyway)."""
        live = self._live
        if live is None or live.pid != os.getpid() or live.thread is None:
            return
        live.stop.set()
        live.wake.set()
        live.thread.join(timeout=5)

    def _ensure(self) -> _Live:
        live = self._live
        if live is not None and live.pid == os.getpid():
            return live
        with self._start_lock:
            live = self._live
            if live is None or live.pid != os.getpid():
                live = _Live()
                live.thread = threading.Thread(
                    target=self._run, args=(live,), name="parley-replica-load", daemon=True
                )
                self._live = live
                live.thread.start()
            return live

    # -- the thread ----------------------------------------------------------------------------
    def _client(self) -> Any:
        if self._client_factory is not None:
            return self._client_factory()
        assert self._redis_spec is not None
        timeout = max(0.05, min(1.0, self.ttl_s / 3))
        return sync_client(self._redis_spec, socket_timeout=timeout, socket_connect_timeout=timeout)

    def _run(self, live: _Live) -> None:
        client: Any = None
        script: Any = None
        while not live.stop.is_set():
            try:
                if client is None:
                    client = self._client()
                    script = client.register_script(SYNC_LUA)
                self._sync(live, script)
            except Exception as exc:  # unreachable, timed out, refused: decide locally, try again
                with live.lock:
                    live.others = None
                    live.read_at = None
                    was_failing, live.failing = live.failing, True
                if not was_failing:
                    log.warning("replica load not shared (%s); each process uses its own counts", exc)
                if client is not None:
                    _close(client)
                client = None
                live.stop.wait(RETRY_S)
                continue
            live.wake.wait(self._interval(live))
            live.wake.clear()
        if client is not None:
            # Leave nothing behind: the others stop counting this process's calls now.
            with contextlib.suppress(Exception):
                client.hdel(self.key, live.process, *(f"{live.process}|{u}" for u in live.mine))
            _close(client)

    def _sync(self, live: _Live, script: Any) -> None:
        with live.lock:
            mine = dict(live.mine)
            live.dirty = False
        args: list[Any] = [live.process, max(1, int(self.ttl_s * 1000))]
        for url, n in mine.items():
            args += [url, n]
        raw = script(keys=[self.key], args=args)
        others: dict[str, int] = {}
        for i in range(0, len(raw) - 1, 2):
            url = raw[i].decode() if isinstance(raw[i], bytes) else str(raw[i])
            others[url] = int(raw[i + 1])
        with live.lock:
            live.others = others
            live.read_at = self._clock()
            if live.failing:
                log.warning("replica load shared again")
            live.failing = False

    def _interval(self, live: _Live) -> float | None:
        """How long the thread waits for a change: ``refresh_s`` while active, else until woken."""
        with live.lock:
            if live.dirty:
                return 0.0
            active = bool(live.mine) or self._clock() - live.active_at < IDLE_AFTER_S
        return self.refresh_s if active else None


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close()

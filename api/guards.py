"""Who is calling and how much they may do: API keys, rate limits, idempotency, body size limits.

Keys are configured only as sha256 hashes, so the settings (and a leaked environment dump) never hold
a usable key. Each key is an *owner*: it sees only its own jobs and batches (others' ids are 404, not
403, so ids cannot be probed). Limits are per owner and kept in Redis, so several API replicas share
them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import IdempotencyInProgress, IdempotencyKeyInvalid, IdempotencyKeyReused
from api.problems import Problem, problem_response
from services.jobstore import DAY_S, RECORD_OVERHEAD, storage_key
from services.observability.metrics import REFUSALS

PUBLIC_OWNER = "public"


def hash_key(key: str) -> str:
    """The sha256 hex digest that goes into ``PARLEY_API_KEYS`` for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Maps a presented bearer key to its owner name by comparing hashes in constant time."""

    def __init__(self, keys: dict[str, str]) -> None:
        self._by_hash = {h.lower().removeprefix("sha256:"): name for name, h in keys.items()}

    @property
    def open(self) -> bool:
        return not self._by_hash

    def owner(self, authorization: str | None) -> str:
        if self.open:
            return PUBLIC_OWNER
        challenge = {"WWW-Authenticate": 'Bearer realm="parley"'}
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Problem(401, "missing API key: send Authorization: Bearer <key>", headers=challenge)
        digest = hash_key(authorization[7:].strip())
        for known, name in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return name
        raise Problem(401, "unknown API key", headers=challenge)


class RateLimiter:
    """Fixed one-minute windows per owner in Redis; 429 with ``Retry-After`` when a window is full."""

    def __init__(self, redis: aioredis.Redis, prefix: str, per_minute: int) -> None:
        self._redis = redis
        self._prefix = prefix
        self._per_minute = per_minute

    async def check(self, owner: str) -> None:
        now = time.time()
        window = int(now // 60)
        key = f"{self._prefix}:rate:{owner}:{window}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, 120)
            count, _ = await pipe.execute()
        if int(count) > self._per_minute:
            REFUSALS.labels("rate_limit", owner).inc()
            retry = max(1, int((window + 1) * 60 - now) + 1)
            raise Problem(
                429,
                f"rate limit of {self._per_minute} requests per minute exceeded",
                type_="/problems/rate-limited",
                headers={"Retry-After": str(retry)},
            )


class AuthFailureLimiter:
    """Failed authentications per client address, limited without locking valid keys out.

    What is counted is the number of *distinct* wrong credentials an address presented in the current
    minute (a HyperLogLog, a few hundred bytes per address): a client repeating one stale key, or a
    check sending no key, stays at 401, while a guesser trying key after key reaches the limit. Past
    it, for the rest of the minute, a wrong key is answered 429 and a right one is accepted only if it
    was accepted from this address before (within ``known_ttl_s``): a guess that happens to be right
    is refused, but the valid keys already in use behind the same NAT or proxy keep working.
    """

    def __init__(
        self, redis: aioredis.Redis, prefix: str, per_minute: int, *, known_ttl_s: int = 86_400
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._per_minute = per_minute
        self._known_ttl_s = known_ttl_s

    def _failures(self, address: str, window: int) -> str:
        return f"{self._prefix}:authfail:{address}:{window}"

    def _known(self, address: str) -> str:
        return f"{self._prefix}:authok:{address}"

    def _refusal(self, now: float) -> Problem:
        REFUSALS.labels("auth_failures", "-").inc()
        window = int(now // 60)
        return Problem(
            429,
            f"too many different failed keys from this address ({self._per_minute} per minute); keys "
            "already used from this address keep working",
            type_="/problems/auth-rate-limited",
            headers={"Retry-After": str(max(1, int((window + 1) * 60 - now) + 1))},
        )

    async def failed(self, address: str, credential: str | None) -> None:
        """Count a wrong credential; raises the 429 ``Problem`` once the address is past the limit."""
        now = time.time()
        key = self._failures(address, int(now // 60))
        digest = hash_key(credential or "")[:16]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.pfadd(key, digest)
            pipe.expire(key, 120)
            pipe.pfcount(key)
            _, _, distinct = await pipe.execute()
        if int(distinct) > self._per_minute:
            raise self._refusal(now)

    async def succeeded(self, address: str, owner: str) -> None:
        """A valid key from ``address``: refused only if the address is past the limit and this key
        was never accepted from it before; otherwise remembered as one of the address's keys."""
        now = time.time()
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.pfcount(self._failures(address, int(now // 60)))
            pipe.sismember(self._known(address), owner)
            distinct, known = await pipe.execute()
        if known:
            return
        if int(distinct) > self._per_minute:
            raise self._refusal(now)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.sadd(self._known(address), owner)
            pipe.expire(self._known(address), self._known_ttl_s)
            await pipe.execute()


@dataclass
class StoredResponse:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class Idempotency:
    """``Idempotency-Key`` on POSTs: the first response is stored and replayed for the same key.

    A key reused with a different request body is a 422 (the client has a bug); a repeat while the
    first request is still being handled is a 409. Failed requests are not stored, so they can be
    retried with the same key. The claim of a request in progress expires after ``pending_ttl_s``
    (the stored response only after ``ttl_s``), so a claim left behind by a crashed process blocks
    its key for a minute, not for a day. A stored response that created a resource (its
    ``Location``) is forgotten when the resource is deleted (``forget``), so a replay never points
    at a resource that is gone: the same request with that key then creates a new one.
    """

    def __init__(self, redis: aioredis.Redis, prefix: str, ttl_s: int, pending_ttl_s: int = 60) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl = ttl_s
        self._pending_ttl = min(pending_ttl_s, ttl_s)

    def _key(self, owner: str, key: str) -> str:
        return f"{self._prefix}:idem:{owner}:{hashlib.sha256(key.encode()).hexdigest()}"

    def _created(self, owner: str, location: str) -> str:
        """Which stored response created the resource at ``location`` (the name of its key)."""
        return f"{self._prefix}:idem-created:{owner}:{hashlib.sha256(location.encode()).hexdigest()}"

    async def begin(self, owner: str, key: str, fingerprint: str) -> StoredResponse | None:
        """Claim ``key``; returns the stored response when this is a replay."""
        if not key or len(key) > 255:
            raise IdempotencyKeyInvalid("Idempotency-Key must be 1..255 characters")
        rkey = self._key(owner, key)
        claim = json.dumps({"state": "pending", "fp": fingerprint})
        if await self._redis.set(rkey, claim, nx=True, ex=self._pending_ttl):
            return None
        raw = await self._redis.get(rkey)
        if raw is None:  # expired between SET and GET: treat as new
            await self._redis.set(rkey, claim, ex=self._pending_ttl)
            return None
        stored = json.loads(raw)
        if stored.get("fp") != fingerprint:
            raise IdempotencyKeyReused("Idempotency-Key was already used with a different request")
        if stored.get("state") == "pending":
            raise IdempotencyInProgress(
                "a request with this Idempotency-Key is still being processed", retry_after_s=1
            )
        return StoredResponse(stored["status"], stored["body"], stored.get("headers", {}))

    async def finish(self, owner: str, key: str, fingerprint: str, response: StoredResponse) -> None:
        value = {
            "state": "done",
            "fp": fingerprint,
            "status": response.status,
            "body": response.body,
            "headers": response.headers,
        }
        text = json.dumps(value)
        counter = storage_key(self._prefix, owner)
        rkey = self._key(owner, key)
        location = response.headers.get("Location")
        written = len(text) + RECORD_OVERHEAD
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(rkey, text, ex=self._ttl)
            if location:
                pipe.set(self._created(owner, location), rkey, ex=self._ttl)
                written += len(rkey) + RECORD_OVERHEAD
            # Counted in the owner's storage (see services.jobstore): it lives up to a day.
            pipe.incrby(counter, written)
            pipe.expire(counter, self._ttl + DAY_S)
            await pipe.execute()

    async def forget(self, owner: str, location: str) -> None:
        """Forget the stored response that created the resource at ``location`` (it was deleted)."""
        link = self._created(owner, location)
        rkey = await self._redis.get(link)
        if rkey:
            await self._redis.delete(rkey, link)

    async def abandon(self, owner: str, key: str) -> None:
        await self._redis.delete(self._key(owner, key))


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


def _declared_length(scope: Scope) -> int:
    """The largest ``Content-Length`` the request declares (0 when none or unreadable)."""
    declared = 0
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                declared = max(declared, int(value))
            except ValueError:
                continue
    return declared


class _LimitedBody:
    """The app's ``receive``: raises ``BodyTooLarge`` past ``limit`` bytes and ``BodyTimeout`` when
    the body is not complete by ``deadline`` (loop time); after the body it passes through untimed
    (a streaming response waits on it for the client's disconnect)."""

    def __init__(self, receive: Receive, limit: int, deadline: float) -> None:
        self._receive = receive
        self._limit = limit
        self._deadline = deadline
        self._seen = 0
        self._done = False

    async def __call__(self) -> Message:
        if self._done:
            return await self._receive()
        remaining = self._deadline - asyncio.get_running_loop().time()
        try:
            message = await asyncio.wait_for(self._receive(), timeout=max(remaining, 0.001))
        except TimeoutError:
            raise BodyTimeout from None
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._limit:
                raise BodyTooLarge
            self._done = not message.get("more_body", False)
        return message


class BodyLimitMiddleware:
    """413 problem for bodies over the limit, checked on ``Content-Length`` and while streaming; 408
    problem for a body that has not fully arrived ``timeout_s`` after the request began (a slow
    sender holds a connection and a buffer, so it is cut off rather than waited for).

    Batch routes get the larger ``batch_limit``; everything else ``limit``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        batch_limit: int,
        batch_prefix: str = "/v1/batches",
        timeout_s: float = 30.0,
    ):
        self.app = app
        self.limit = limit
        self.batch_limit = batch_limit
        self.batch_prefix = batch_prefix
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.batch_limit if scope["path"].startswith(self.batch_prefix) else self.limit
        if _declared_length(scope) > limit:
            await self._reject(scope, receive, send, limit)
            return
        started = False
        limited_receive = _LimitedBody(receive, limit, asyncio.get_running_loop().time() + self.timeout_s)

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(scope, receive, send, limit)
        except BodyTimeout:
            if not started:
                await self._timed_out(scope, receive, send)

    async def _timed_out(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            None,
            408,
            f"the request body did not arrive within {self.timeout_s:g} s",
            type_="/problems/body-timeout",
            title="Request Timeout",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = problem_response(
            None, 413, f"request body is larger than {limit} bytes", type_="/problems/body-too-large"
        )
        await response(scope, receive, send)

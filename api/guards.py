"""Who is calling and how much they may do: API keys, rate limits, idempotency, body size limits.

Keys are configured only as sha256 hashes, so the settings (and a leaked environment dump) never hold
a usable key. Each key is an *owner*: it sees only its own jobs and batches (others' ids are 404, not
403, so ids cannot be probed). Limits are per owner and kept in Redis, so several API replicas share
them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import Problem, problem_response
from services.metrics import REFUSALS

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
    """Failed authentications per client address in one-minute windows: past the limit the address
    gets 429 (with ``Retry-After``) before its key is even looked at, so keys cannot be guessed fast."""

    def __init__(self, redis: aioredis.Redis, prefix: str, per_minute: int) -> None:
        self._redis = redis
        self._prefix = prefix
        self._per_minute = per_minute

    def _key(self, address: str, window: int) -> str:
        return f"{self._prefix}:authfail:{address}:{window}"

    async def check(self, address: str) -> None:
        now = time.time()
        window = int(now // 60)
        failures = await self._redis.get(self._key(address, window))
        if failures is not None and int(failures) >= self._per_minute:
            REFUSALS.labels("auth_failures", "-").inc()
            raise Problem(
                429,
                f"too many failed authentications from this address ({self._per_minute} per minute)",
                type_="/problems/auth-rate-limited",
                headers={"Retry-After": str(max(1, int((window + 1) * 60 - now) + 1))},
            )

    async def failed(self, address: str) -> None:
        key = self._key(address, int(time.time() // 60))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, 120)
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
    its key for a minute, not for a day.
    """

    def __init__(self, redis: aioredis.Redis, prefix: str, ttl_s: int, pending_ttl_s: int = 60) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl = ttl_s
        self._pending_ttl = min(pending_ttl_s, ttl_s)

    def _key(self, owner: str, key: str) -> str:
        return f"{self._prefix}:idem:{owner}:{hashlib.sha256(key.encode()).hexdigest()}"

    async def begin(self, owner: str, key: str, fingerprint: str) -> StoredResponse | None:
        """Claim ``key``; returns the stored response when this is a replay."""
        if not key or len(key) > 255:
            raise Problem(400, "Idempotency-Key must be 1..255 characters")
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
            raise Problem(
                422,
                "Idempotency-Key was already used with a different request",
                type_="/problems/idempotency-key-reused",
            )
        if stored.get("state") == "pending":
            raise Problem(
                409,
                "a request with this Idempotency-Key is still being processed",
                type_="/problems/idempotency-in-progress",
                headers={"Retry-After": "1"},
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
        await self._redis.set(self._key(owner, key), json.dumps(value), ex=self._ttl)

    async def abandon(self, owner: str, key: str) -> None:
        await self._redis.delete(self._key(owner, key))


class BodyTooLarge(Exception):
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


class BodyLimitMiddleware:
    """413 problem for bodies over the limit, checked on ``Content-Length`` and while streaming.

    Batch routes get the larger ``batch_limit``; everything else ``limit``.
    """

    def __init__(self, app: ASGIApp, *, limit: int, batch_limit: int, batch_prefix: str = "/v1/batches"):
        self.app = app
        self.limit = limit
        self.batch_limit = batch_limit
        self.batch_prefix = batch_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.batch_limit if scope["path"].startswith(self.batch_prefix) else self.limit
        if _declared_length(scope) > limit:
            await self._reject(scope, receive, send, limit)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

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

    async def _reject(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = problem_response(
            None, 413, f"request body is larger than {limit} bytes", type_="/problems/body-too-large"
        )
        await response(scope, receive, send)

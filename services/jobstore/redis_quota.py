"""Daily token quotas and storage accounting of the Redis job store (``RedisJobStore`` includes it)."""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis

from parley_wire.models import Usage
from services.jobstore.keys import JobKeys
from services.jobstore.records import DAY_S, usage_day


class RedisQuota(JobKeys):
    """Token reservations and charges per owner and UTC day, and the bytes an owner keeps.

    Atomic steps go through the store's Lua scripts (``RESERVE_LUA``, ``CHARGE_LUA``), registered by
    ``RedisJobStore``.
    """

    redis: aioredis.Redis
    ttl_s: int
    _reserve: Any
    _charge: Any

    async def reserve_tokens(self, owner: str, day: str, amount: int, quota: int | None) -> Usage | None:
        """Reserve ``amount`` tokens of the owner's day; None (nothing reserved) if the quota is short.

        Atomic, so two submissions racing for the last of a quota cannot both get it.
        """
        ok = await self._reserve(keys=[self.k_usage(owner, day)], args=[amount, quota or 0])
        return None if not int(ok) else await self.usage(owner, day)

    async def charge(
        self,
        job_id: str,
        prompt_tokens: int,
        completion_tokens: int,
        calls: int = 1,
        *,
        charge_id: str | None = None,
        charge_id_ttl_s: int = 60,
    ) -> bool:
        """Charge a change in what the job's LLM calls cost (``Spend``) to the job and its owner's
        day, drawn from (or given back to) the job's reservation. Called around every call, so
        cancelled, failed and resumed work is charged too, and so is a call in flight when its job was
        deleted (to the owner's day only, found through the job's tombstone). False when neither the
        job nor its tombstone exists (the job expired). A charge sent again with the same
        ``charge_id`` within ``charge_id_ttl_s`` (after a connection lost before Redis replied) is
        applied once."""
        owner, day = await self.redis.hmget(self.k_job(job_id), ["owner", "usage_day"])
        if owner is None:
            owner, day = await self.redis.hmget(self.k_tombstone(job_id), ["owner", "usage_day"])
            if not owner:
                return False
        keys = [
            self.k_job(job_id),
            self.k_usage(owner, day or usage_day()),
            self.k_tombstone(job_id),
            self.k_charges(job_id),
        ]
        args = [prompt_tokens, completion_tokens, calls, charge_id or "", charge_id_ttl_s]
        return bool(await self._charge(keys=keys, args=args))

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

"""A job store on the session's redis-server, under a prefix of its own (tests never share keys)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from services.jobstore import RedisJobStore, new_id


@contextlib.asynccontextmanager
async def job_store(redis_url: str, ttl_s: int, prefix: str = "test") -> AsyncIterator[RedisJobStore]:
    store = RedisJobStore.from_url(redis_url, prefix=new_id(prefix), ttl_s=ttl_s)
    try:
        yield store
    finally:
        await store.aclose()

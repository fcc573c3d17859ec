"""The daily quota's accounting in the real Redis store: a running job holds exactly its reservation.

Each LLM call is charged twice (its worst case before it is sent, then the difference to what the
server reported); those charges are drawn from the job's reservation and given back to it, so
``tokens + reserved`` for a running job never grows past what it reserved at submission, and other
jobs of the same key are admitted or refused on that figure alone, however their calls interleave.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.jobstore import JobRecord, RedisJobStore, Usage, new_id, usage_day
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from tests.api.support import RedisServer
from tests.support.jobstore import job_store

pytestmark = pytest.mark.integration

QUOTA = 5_000


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisJobStore]:
    async with job_store(redis_server.url, ttl_s=DEFAULT_JOB_TTL_S, prefix="quota") as store:
        yield store


async def submitted(store: RedisJobStore, owner: str, reserve: int) -> str:
    """A job admitted the way the gateway admits one: its tokens reserved, then the record stored."""
    day = usage_day()
    assert await store.reserve_tokens(owner, day, reserve, QUOTA) is not None
    job = JobRecord(job_id=new_id("job"), owner=owner, question="Q?", reserved_tokens=reserve, usage_day=day)
    await store.create_jobs([job])
    return job.job_id


async def today(store: RedisJobStore, owner: str) -> Usage:
    return await store.usage(owner, usage_day())


async def test_a_running_job_holds_its_reservation_and_no_more(store: RedisJobStore) -> None:
    job = await submitted(store, "alice", 2_000)
    # Three calls in flight, each charged its worst case: drawn from the reservation.
    for _ in range(3):
        await store.charge(job, 250, 50, 1)
    usage = await today(store, "alice")
    assert (usage.tokens, usage.reserved) == (900, 1_100)
    # One settles under its worst case, one is refunded whole (never served): back to the reservation.
    await store.charge(job, -120, -20, 0)
    await store.charge(job, -250, -50, -1)
    usage = await today(store, "alice")
    assert (usage.tokens, usage.reserved, usage.calls) == (460, 1_540, 2)
    assert usage.tokens + usage.reserved == 2_000
    # A second job of the key fits exactly in what is left of the quota, a third does not.
    assert await store.reserve_tokens("alice", usage_day(), QUOTA - 2_000, QUOTA) is not None
    assert await store.reserve_tokens("alice", usage_day(), 1, QUOTA) is None


async def test_tokens_beyond_the_reservation_are_paid_back_first(store: RedisJobStore) -> None:
    job = await submitted(store, "bob", 100)
    await store.charge(job, 120, 30, 1)  # 150 charged: 100 drawn, 50 beyond the reservation
    assert (u := await today(store, "bob")).tokens == 150 and u.reserved == 0
    await store.charge(job, -30, 0, 0)  # settles at 120: the excess shrinks, nothing returns
    assert (u := await today(store, "bob")).tokens == 120 and u.reserved == 0
    await store.charge(job, -60, 0, 0)  # 60 used: 20 of excess paid back, then 40 returned
    assert (u := await today(store, "bob")).tokens == 60 and u.reserved == 40


async def test_a_finished_job_releases_its_reservation_once(store: RedisJobStore) -> None:
    job = await submitted(store, "carol", 1_000)
    await store.charge(job, 300, 100, 1)  # a call in flight when the job is cancelled
    assert await store.transition(job, "cancelled", ("queued",), event="job.cancelled")
    assert (u := await today(store, "carol")).tokens == 400 and u.reserved == 0
    # The call settles after the cancellation: charged at what it used, the quota's reservation
    # (already released) is not raised again.
    await store.charge(job, -100, -40, 0)
    assert (u := await today(store, "carol")).tokens == 260 and u.reserved == 0
    assert await store.charge("job_gone", 10, 10, 1) is False

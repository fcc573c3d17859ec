"""Removing jobs and batches for good in the real Redis store (a client's ``DELETE``).

A removed job leaves no key but its tombstone: no record, result, events, checkpoint or lease, no place
in the owner's listing or active set, and what it was counted in the owner's storage is taken off
(never below what other records were counted). Its tokens stay charged, and a call that was in flight
when it was removed is still charged to the owner's day. Whatever a worker that has not noticed yet
writes afterwards (a transition, an event, progress, a checkpoint, an attempt, a keep-alive) writes
nothing, so the record never comes back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.jobstore import (
    ACTIVE,
    JOB_OVERHEAD_BYTES,
    BatchRecord,
    JobRecord,
    RedisJobStore,
    new_id,
    usage_day,
)
from tests.api.support import RedisServer
from tests.support.jobstore import job_store

pytestmark = pytest.mark.integration

TTL_S = 600
QUESTION = "Which city is the capital of France? " + "x" * 2000


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisJobStore]:
    async with job_store(redis_server.url, ttl_s=TTL_S, prefix="rm") as store:
        yield store


async def running(store: RedisJobStore, owner: str = "alice", batch: BatchRecord | None = None) -> str:
    """A stored job a worker has taken up to ``debating``: leased, a checkpoint, events, one call charged."""
    job = JobRecord(
        job_id=new_id("job"), owner=owner, question=QUESTION, reserved_tokens=1_000, usage_day=usage_day()
    )
    if batch is not None:
        job = job.model_copy(update={"batch_id": batch.batch_id, "index": 0, "item_id": "q0"})
    await store.reserve_tokens(owner, usage_day(), 1_000, None)
    await store.create_jobs([job], batch)
    assert await store.incr_attempts(job.job_id) == 1
    assert await store.acquire_lease(job.job_id, "w1", 15_000)
    assert await store.transition(job.job_id, "retrieving", ACTIVE, fields={"worker": "w1"})
    assert await store.transition(job.job_id, "debating", ("retrieving",))
    await store.save_checkpoint(job.job_id, {"checkpoint": {"round": 1}})
    assert await store.emit(job.job_id, "turn.completed", {"agent": 0, "text": "Paris. " * 30})
    assert await store.charge(job.job_id, 300, 100, 1)
    return job.job_id


async def keys_of(store: RedisJobStore, job_id: str) -> set[str]:
    return {k async for k in store.redis.scan_iter(match=f"{store.prefix}:job:{job_id}*", count=1000)}


async def test_a_removed_job_leaves_only_its_tombstone(store: RedisJobStore) -> None:
    job_id = await running(store)
    assert await store.remove_job(job_id) is False  # still running: cancel it first
    assert await store.get_job(job_id) is not None

    assert await store.transition(job_id, "cancelled", ACTIVE, event="job.cancelled")
    assert await store.remove_job(job_id) is True
    assert await keys_of(store, job_id) == {store.k_tombstone(job_id)}
    assert 0 < await store.redis.ttl(store.k_tombstone(job_id)) <= TTL_S
    assert await store.get_job(job_id) is None
    assert await store.get_jobs([job_id]) == [None]
    assert await store.read_events(job_id) == []
    assert await store.list_jobs("alice", 10) == []
    assert await store.active_count("alice") == 0
    assert await store.redis.zscore(store.k_owner_jobs("alice"), job_id) is None
    assert await store.remove_job(job_id) is False  # twice: nothing left


async def test_a_worker_that_has_not_noticed_re_creates_nothing(store: RedisJobStore) -> None:
    job_id = await running(store)
    assert await store.transition(job_id, "cancelled", ACTIVE, event="job.cancelled")
    assert await store.remove_job(job_id)

    # Everything a worker may still do with the job, in the order it might.
    assert await store.emit(job_id, "round.completed", {"round": 1}) is None
    assert await store.set_fields(job_id, {"round": 1}) is False
    await store.save_checkpoint(job_id, {"checkpoint": {"round": 2}})
    assert await store.transition(job_id, "completed", ("debating",), fields={"result": {"a": 1}}) is False
    assert await store.transition(job_id, "failed", ACTIVE, event="job.failed") is False
    assert await store.transition(job_id, "queued", ("retrieving", "debating"), event="job.requeued") is False
    assert await store.add_attempts(job_id, -1) == 0
    assert await store.incr_attempts(job_id) == 0
    assert await store.keep_alive(job_id) is False
    await store.release_lease(job_id, "w1")

    assert await keys_of(store, job_id) == {store.k_tombstone(job_id)}
    assert await store.get_job(job_id) is None
    assert await store.list_jobs("alice", 10) == []


async def test_its_tokens_stay_charged_and_a_call_in_flight_is_charged_too(store: RedisJobStore) -> None:
    job_id = await running(store, owner="bob")
    await store.charge(job_id, 200, 50, 1)  # a second call in flight: its worst case, before it is sent
    assert await store.transition(job_id, "cancelled", ACTIVE, event="job.cancelled")
    assert await store.remove_job(job_id)
    usage = await store.usage("bob", usage_day())
    assert (usage.tokens, usage.calls, usage.reserved, usage.jobs_cancelled) == (650, 2, 0, 1)

    # The call settles after the removal: under its worst case, on bob's day alone.
    assert await store.charge(job_id, -120, -20, 0) is True
    usage = await store.usage("bob", usage_day())
    assert (usage.tokens, usage.prompt_tokens, usage.completion_tokens) == (510, 380, 130)
    assert usage.reserved == 0 and usage.calls == 2
    assert await keys_of(store, job_id) == {store.k_tombstone(job_id)}
    # A job that never existed (or expired) is charged nothing.
    assert await store.charge(new_id("job"), 10, 10, 1) is False
    assert (await store.usage("bob", usage_day())).tokens == 510


async def test_removal_takes_off_what_the_job_was_counted_in_storage(store: RedisJobStore) -> None:
    kept = await running(store, owner="carol")  # another job of the key, which stays
    kept_bytes, _ = await store.stored_bytes("carol")
    job_id = await running(store, owner="carol")
    assert await store.transition(
        job_id, "completed", ("debating",), event="job.completed", fields={"result": {"answer": "x" * 5000}}
    )
    before, _ = await store.stored_bytes("carol")
    assert await store.remove_job(job_id)
    after, _ = await store.stored_bytes("carol")
    # Its record (the question, the overhead) and its result are no longer counted …
    assert before - after > JOB_OVERHEAD_BYTES + len(QUESTION)
    # … while everything the other job was counted still is: the count stays an upper bound.
    assert after >= kept_bytes
    assert await store.get_job(kept) is not None


async def test_a_batch_is_removed_with_its_items(store: RedisJobStore) -> None:
    batch = BatchRecord(batch_id=new_id("bat"), owner="dave", total=3, config={"rounds": 2})
    jobs = [
        JobRecord(job_id=new_id("job"), owner="dave", question=f"Q{i}?", batch_id=batch.batch_id, index=i)
        for i in range(3)
    ]
    await store.create_jobs(jobs, batch)
    assert await store.transition(jobs[0].job_id, "completed", ("queued",), fields={"result": {"a": 1}})
    before, _ = await store.stored_bytes("dave")

    assert await store.remove_batch(batch.batch_id) is False  # two items unfinished: kept, batch too
    assert await store.get_batch(batch.batch_id) is not None
    assert await store.get_job(jobs[0].job_id) is None  # the finished item went
    for job in jobs[1:]:
        assert await store.transition(job.job_id, "cancelled", ACTIVE, event="job.cancelled")

    assert await store.remove_batch(batch.batch_id) is True
    assert await store.get_batch(batch.batch_id) is None
    assert not await store.redis.exists(store.k_batch(batch.batch_id), store.k_batch_jobs(batch.batch_id))
    for job in jobs:
        assert await keys_of(store, job.job_id) <= {store.k_tombstone(job.job_id)}
    assert await store.list_batches("dave", 10) == []
    assert await store.list_jobs("dave", 10) == []
    after, _ = await store.stored_bytes("dave")
    assert before - after >= 3 * JOB_OVERHEAD_BYTES
    assert after >= 0
    assert await store.remove_batch(batch.batch_id) is False

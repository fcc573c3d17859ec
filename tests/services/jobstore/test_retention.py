"""What the real Redis store keeps of a finished job, for how long, and that it still reads the same.

A finished job keeps its record with the result packed, its event stream packed into the record (the
stream lapses a minute later) and its place in its batch and the owner's listings; its checkpoint,
lease and a client's pool go. Every key carries a TTL no longer than the retention, and what lists or
groups a job lives at least as long as the job. Events read from the packed copy are the stream's,
with the same ids, so a replay with ``Last-Event-ID`` cannot tell the two apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from services.jobstore import (
    ACTIVE,
    EVENTS_GRACE_S,
    BatchRecord,
    Event,
    JobRecord,
    RedisJobStore,
    new_id,
)
from tests.api.support import RedisServer
from tests.support.jobstore import job_store

pytestmark = pytest.mark.integration

TTL_S = 600
POOL = [{"title": f"Paris {i}", "text": "Paris is the capital of France. " * 20} for i in range(3)]


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisJobStore]:
    async with job_store(redis_server.url, ttl_s=TTL_S, prefix="ret") as store:
        yield store


async def run_to_debating(store: RedisJobStore, *, batch: bool = False) -> JobRecord:
    """A stored job moved the way a worker moves it: leased, retrieving, debating, a checkpoint saved
    and a few events written."""
    job = JobRecord(job_id=new_id("job"), owner="alice", question="Capital of France?", pool=POOL)
    record = None
    if batch:
        record = BatchRecord(batch_id=new_id("bat"), owner="alice", total=1)
        job = job.model_copy(update={"batch_id": record.batch_id, "index": 0, "item_id": "q0"})
    await store.create_jobs([job], record)
    assert await store.acquire_lease(job.job_id, "w1", 15_000)
    assert await store.transition(job.job_id, "retrieving", ACTIVE, fields={"worker": "w1"})
    assert await store.emit(job.job_id, "pool.ready", {"items": 3})
    assert await store.transition(job.job_id, "debating", ("retrieving",))
    await store.save_checkpoint(job.job_id, {"checkpoint": {"round": 1}, "pool": {"items": POOL}})
    for agent in range(2):
        assert await store.emit(job.job_id, "turn.completed", {"agent": agent, "text": "Paris. " * 30})
    return job


async def complete(store: RedisJobStore, job_id: str) -> dict[str, object]:
    result: dict[str, object] = {
        "answer": "Paris",
        "transcript": [{"role": "debater", "text": "Paris. " * 200}] * 6,
    }
    assert await store.transition(
        job_id,
        "completed",
        ("debating",),
        event="job.completed",
        data={"answer": "Paris"},
        fields={"result": result},
    )
    return result


async def job_keys(store: RedisJobStore, *ids: str) -> dict[str, int]:
    """Every key naming one of ``ids``, with its TTL in seconds."""
    r = store.redis
    found = {}
    for ident in ids:
        async for key in r.scan_iter(match=f"{store.prefix}:*{ident}*", count=1000):
            found[key] = int(await r.ttl(key))
    return found


async def test_a_finished_job_keeps_its_record_packed_and_drops_what_only_a_run_needs(
    store: RedisJobStore,
) -> None:
    job = await run_to_debating(store, batch=True)
    assert await store.redis.exists(store.k_checkpoint(job.job_id), store.k_lease(job.job_id)) == 2
    live = await store.read_events(job.job_id)
    result = await complete(store, job.job_id)
    r = store.redis

    # Nothing a run needs is left: no checkpoint, no lease, no pool the client brought.
    assert not await r.exists(store.k_checkpoint(job.job_id), store.k_lease(job.job_id))
    fields = await r.hgetall(store.k_job(job.job_id))
    assert "pool" not in fields and "result" not in fields
    assert {"result_z", "events_z"} <= set(fields)
    # The result reads as it was written, and is much smaller as stored.
    found = (await store.get_jobs([job.job_id], with_result=True))[0]
    assert found is not None and found.result == result and await store.get_result(job.job_id) == result
    assert len(fields["result_z"]) * 3 < len(found.result_json or "")

    # Every key carries a TTL no longer than the retention; the stream lapses within the grace.
    keys = await job_keys(store, job.job_id, job.batch_id or "")
    assert keys and all(0 < ttl <= TTL_S for ttl in keys.values()), keys
    assert 0 < keys[store.k_events(job.job_id)] <= EVENTS_GRACE_S
    for key in (store.k_owner_jobs("alice"), store.k_owner_batches("alice")):
        assert 0 < await r.ttl(key) <= TTL_S

    # The events read the same from the stream and, once it has lapsed, from the packed copy.
    from_stream = await store.read_events(job.job_id)
    assert from_stream[: len(live)] == live and from_stream[-1].type == "job.completed"
    await r.delete(store.k_events(job.job_id))
    assert await store.read_events(job.job_id) == from_stream
    # Resuming after any event gives exactly the ones after it, and count pages through them.
    for i, event in enumerate(from_stream):
        assert await store.read_events(job.job_id, event.id) == from_stream[i + 1 :]
    assert await store.read_events(job.job_id, count=2) == from_stream[:2]
    ms_only = from_stream[1].id.split("-")[0]  # "ms" alone is ms-0, as XREAD reads it
    assert await store.read_events(job.job_id, ms_only) == [e for e in from_stream if e.id > f"{ms_only}-0"]
    # After the terminal event nothing is waited for: the job is finished.
    started = time.monotonic()
    assert await store.read_events(job.job_id, from_stream[-1].id, block_ms=3000) == []
    assert time.monotonic() - started < 1.0


async def test_a_reader_waiting_on_the_stream_gets_the_terminal_event(store: RedisJobStore) -> None:
    job = await run_to_debating(store)
    seen = await store.read_events(job.job_id)
    waiting = asyncio.create_task(store.read_events(job.job_id, seen[-1].id, block_ms=5000))
    await asyncio.sleep(0.2)
    await complete(store, job.job_id)
    got = await asyncio.wait_for(waiting, 5)
    assert [e.type for e in got] == ["job.completed"]


async def test_a_checkpoint_saved_after_the_job_finished_is_not_kept(store: RedisJobStore) -> None:
    job = await run_to_debating(store)
    assert await store.transition(job.job_id, "cancelled", ACTIVE, event="job.cancelled", data={})
    # A worker that has not yet noticed the cancellation saves the round it just finished.
    await store.save_checkpoint(job.job_id, {"checkpoint": {"round": 2}, "pool": {}})
    assert not await store.redis.exists(store.k_checkpoint(job.job_id))
    assert await store.load_checkpoint(job.job_id) is None


async def test_batch_and_listing_live_as_long_as_a_job_that_finished_late(store: RedisJobStore) -> None:
    job = await run_to_debating(store, batch=True)
    assert job.batch_id is not None
    r = store.redis
    # The batch was stored long ago: its keys and the owner's indexes are about to expire.
    batch_keys = [store.k_batch(job.batch_id), store.k_batch_jobs(job.batch_id)]
    indexes = [store.k_owner_jobs("alice"), store.k_owner_batches("alice")]
    for key in batch_keys + indexes:
        await r.expire(key, 5)
    await complete(store, job.job_id)
    for key in batch_keys + indexes:
        assert TTL_S - 5 <= await r.ttl(key) <= TTL_S, key
    assert await store.get_batch(job.batch_id) is not None


async def test_every_write_to_an_unfinished_job_restarts_its_retention(store: RedisJobStore) -> None:
    job = await run_to_debating(store)
    r = store.redis
    for key in (store.k_job(job.job_id), store.k_events(job.job_id), store.k_checkpoint(job.job_id)):
        await r.expire(key, 5)
    assert await store.emit(job.job_id, "round.completed", {"round": 1})
    for key in (store.k_job(job.job_id), store.k_events(job.job_id), store.k_checkpoint(job.job_id)):
        assert await r.ttl(key) > TTL_S - 5, key
    # The sweep's keep-alive does the same for a job nothing writes to (a long wait in the queue)...
    await r.expire(store.k_job(job.job_id), 5)
    assert await store.keep_alive(job.job_id)
    assert await r.ttl(store.k_job(job.job_id)) > TTL_S - 5
    # ...and nothing once the job has finished: its retention runs from its last status change.
    await complete(store, job.job_id)
    await r.expire(store.k_job(job.job_id), 5)
    assert not await store.keep_alive(job.job_id)
    assert await r.ttl(store.k_job(job.job_id)) <= 5


async def test_a_job_written_before_packing_still_reads(store: RedisJobStore) -> None:
    """A record an older version finished (plain ``result``, events only in the stream) reads as before."""
    job = JobRecord(job_id=new_id("job"), owner="alice", question="Q?", status="completed")
    await store.create_jobs([job])
    await store.redis.hset(store.k_job(job.job_id), "result", '{"answer": "Paris"}')
    assert await store.get_result(job.job_id) == {"answer": "Paris"}
    found = (await store.get_jobs([job.job_id], with_result=True))[0]
    assert found is not None and found.result_json == '{"answer": "Paris"}'
    events = await store.read_events(job.job_id)
    assert [e.type for e in events] == ["job.queued"] and isinstance(events[0], Event)

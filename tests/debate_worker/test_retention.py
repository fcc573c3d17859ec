"""The worker and its sweep keep a job as long as the one retention setting says, and no more.

A real redis-server and the scripted LLM: a debate run by ``JobRunner`` leaves Redis a bounded number
of bytes once finished (measured with ``MEMORY USAGE``; the version before jobs were packed left
46 KB for this job, 19 KB for one without a pool), every key under the retention the worker was
given through ``PARLEY_JOB_TTL_S``; the sweep keeps unfinished jobs alive and prunes the listing
indexes of ids whose job has expired.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from debate_worker.job_runner import JobRunner
from debate_worker.runtime import WorkerRuntime
from debate_worker.sweeper import JobSweeper
from debate_worker.worker_settings import WorkerSettings
from services.jobstore import EVENTS_GRACE_S, BatchRecord, JobRecord, RedisJobStore, new_id
from services.jobstore.settings import RetentionSettings
from services.llm.settings import LLMSettings
from services.settings import RetrieverClientSettings
from tests.api.support import RedisServer
from tests.debate_worker.test_tasks import Models
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

TTL_S = 900
# What one finished debate over a three-passage pool may keep in Redis for the retention period: its
# record with the result (the transcript, every prompt included) and its events packed. Measured
# 6.3 KB with Redis 7.0; unpacked it was 46 KB (a 24.7 KB record, a 16.5 KB checkpoint kept for the
# whole retention and a 4.8 KB stream), and any one of the three back unpacked passes this bound.
FINISHED_JOB_BYTES = 9_000
PASSAGE = ("Paris is the capital and most populous city of France, on the Seine. " * 10)[:700]
POOL = [{"title": f"Paris {i}", "text": PASSAGE, "source": "wikipedia"} for i in range(3)]


@pytest.fixture
def retention(monkeypatch: pytest.MonkeyPatch) -> RetentionSettings:
    """The retention as an operator sets it: one variable, read by the worker at start-up."""
    monkeypatch.setenv("PARLEY_JOB_TTL_S", str(TTL_S))
    return RetentionSettings()


def runtime(redis_url: str, llm: ScriptedLLM, prefix: str) -> WorkerRuntime:
    settings = WorkerSettings(redis_url=redis_url, key_prefix=prefix, lease_ttl_s=1.0)
    rt = WorkerRuntime(settings, LLMSettings(), RetrieverClientSettings())
    rt.models_factory = lambda: Models(llm.base_url)
    return rt


@pytest.fixture
async def worker_store(
    redis_server: RedisServer, llm: ScriptedLLM, retention: RetentionSettings
) -> AsyncIterator[tuple[WorkerRuntime, RedisJobStore]]:
    rt = runtime(redis_server.url, llm, new_id("r")[-10:])
    store = rt.store()
    try:
        yield rt, store
    finally:
        await store.aclose()


async def memory(store: RedisJobStore, job_id: str) -> dict[str, tuple[int, int]]:
    """Every key of a job: (MEMORY USAGE bytes, TTL s)."""
    r = store.redis
    out = {}
    async for key in r.scan_iter(match=f"{store.prefix}:job:{job_id}*", count=1000):
        out[key] = (int(await r.memory_usage(key, samples=0) or 0), int(await r.ttl(key)))
    return out


async def test_the_worker_keeps_jobs_for_the_configured_retention(
    worker_store: tuple[WorkerRuntime, RedisJobStore],
) -> None:
    rt, store = worker_store
    assert rt.retention.job_ttl_s == TTL_S and store.ttl_s == TTL_S
    job = JobRecord(
        job_id=new_id("job"),
        owner="t",
        question="What is the capital of France?",
        config={"knowledge": "wikipedia", "k_wiki": 3, "rounds": 2},
        pool=POOL,
    )
    await store.create_jobs([job])
    assert await JobRunner(rt, store).execute(job.job_id) == "completed"
    keys = await memory(store, job.job_id)
    # No checkpoint or lease left, every key expiring within the retention (the worker wrote last).
    assert set(keys) == {store.k_job(job.job_id), store.k_events(job.job_id)}, keys
    assert all(0 < ttl <= TTL_S for _, ttl in keys.values()), keys
    assert keys[store.k_job(job.job_id)][1] > TTL_S - 60
    # The stream lapses within the grace; what stays for the retention is the packed record.
    assert keys[store.k_events(job.job_id)][1] <= EVENTS_GRACE_S
    kept = sum(size for size, ttl in keys.values() if ttl > EVENTS_GRACE_S)
    assert kept < FINISHED_JOB_BYTES, keys
    result = await store.get_result(job.job_id)
    assert result is not None and result["answer"] == "Paris"
    assert all(rec["messages"] for rec in result["transcript"])  # the transcript is whole
    assert [e.type for e in await store.read_events(job.job_id, count=1000)][-1] == "job.completed"


async def test_the_sweep_keeps_unfinished_jobs_and_prunes_expired_ids_from_the_listings(
    redis_server: RedisServer, retention: RetentionSettings
) -> None:
    prefix = new_id("sw")[-10:]
    store = RedisJobStore.from_url(redis_server.url, prefix=prefix, ttl_s=retention.job_ttl_s)
    settings = WorkerSettings(redis_url=redis_server.url, key_prefix=prefix, sweep_interval_s=0.01)
    sweeper = JobSweeper(store, settings, lambda job_id, queue: None, queues=(f"{prefix}.q",))
    r = store.redis
    try:
        batch = BatchRecord(batch_id=new_id("bat"), owner="o", total=1)
        queued = JobRecord(job_id=new_id("job"), owner="o", question="Q?", batch_id=batch.batch_id, index=0)
        await store.create_jobs([queued], batch)
        # Queued far longer than usual: its keys are close to expiring.
        for key in (store.k_job(queued.job_id), store.k_events(queued.job_id), store.k_active("o")):
            await r.expire(key, 30)
        # The listings hold ids of jobs and batches that expired long ago, and one just submitted.
        old = time.time() - TTL_S - 60
        gone_jobs = [new_id("job") for _ in range(3)]
        gone_batch = new_id("bat")
        await r.zadd(store.k_owner_jobs("o"), {**dict.fromkeys(gone_jobs, old), queued.job_id: old})
        await r.zadd(store.k_owner_jobs("o"), {new_id("job"): time.time()})
        await r.zadd(store.k_owner_batches("o"), {gone_batch: old, batch.batch_id: old})
        report = await sweeper.sweep()
        assert report is not None
        assert report.kept_alive == [queued.job_id]
        for key in (store.k_job(queued.job_id), store.k_events(queued.job_id), store.k_active("o")):
            assert await r.ttl(key) > TTL_S - 10, key
        assert report.pruned == 4
        listed = await r.zrange(store.k_owner_jobs("o"), 0, -1)
        assert queued.job_id in listed and not set(gone_jobs) & set(listed) and len(listed) == 2
        assert await r.zrange(store.k_owner_batches("o"), 0, -1) == [batch.batch_id]
        # A second pass finds nothing more to do: the job's keys are fresh, the indexes clean.
        await asyncio.sleep(0.06)  # the sweep lock lasts 50 ms at least
        again = await sweeper.sweep()
        assert again is not None and again.kept_alive == [] and again.pruned == 0
    finally:
        await store.aclose()

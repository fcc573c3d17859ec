"""A call's charge survives a Redis restart exactly once.

Redis may run the charge script and die before its reply reaches the worker: the worker sees a lost
connection and sends the charge again. The retry carries the first try's id, so the job and its owner
are charged once, not twice (the soak's Redis kill caught a job charged a second worst case)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.exceptions

from debate_worker.job_debate import JobDebate
from debate_worker.runtime import WorkerRuntime
from debate_worker.worker_settings import WorkerSettings
from engine.context import Spend
from services.jobstore import JobRecord, RedisJobStore, new_id, usage_day
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from services.llm.settings import LLMSettings
from services.settings import RetrieverClientSettings
from tests.api.support import RedisServer
from tests.support.jobstore import job_store

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisJobStore]:
    async with job_store(redis_server.url, ttl_s=DEFAULT_JOB_TTL_S, prefix="charges") as store:
        yield store


async def submitted(store: RedisJobStore, owner: str) -> str:
    day = usage_day()
    assert await store.reserve_tokens(owner, day, 1_000, None) is not None
    job = JobRecord(job_id=new_id("job"), owner=owner, question="Q?", reserved_tokens=1_000, usage_day=day)
    await store.create_jobs([job])
    return job.job_id


class RepliesLost:
    """The real store, but the first ``lose`` charges are applied and then answered with a lost
    connection, as when Redis is killed between running the script and replying."""

    def __init__(self, store: RedisJobStore, lose: int) -> None:
        self.store = store
        self.lose = lose
        self.tries = 0

    async def charge(self, *args: Any, **kwargs: Any) -> bool:
        self.tries += 1
        applied = await self.store.charge(*args, **kwargs)
        if self.lose:
            self.lose -= 1
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return applied


def job_debate(store: RepliesLost) -> JobDebate:
    runtime = WorkerRuntime(WorkerSettings(charge_retry_s=5), LLMSettings(), RetrieverClientSettings())
    return JobDebate(runtime, store)  # type: ignore[arg-type]  # only charge() is used


async def test_a_charge_whose_reply_was_lost_is_applied_once(store: RedisJobStore) -> None:
    job = await submitted(store, "alice")
    lossy = RepliesLost(store, lose=2)
    await job_debate(lossy)._charge(job, Spend(300, 100, 1))  # the worst case before a call
    await job_debate(lossy)._charge(job, Spend(-100, -40, 0))  # its settlement
    assert lossy.tries == 4  # each lost reply was tried again
    assert await store.spent(job) == (1, 260)
    usage = await store.usage("alice", usage_day())
    assert (usage.tokens, usage.reserved, usage.calls) == (260, 740, 1)
    # The ids are kept a minute past the worker's retries (5 s here), not with the job.
    assert 0 < await store.redis.ttl(store.k_charges(job)) <= 65
    assert not store.k_charges(job).startswith(store.k_job(job))


async def test_charges_with_distinct_ids_all_count(store: RedisJobStore) -> None:
    job = await submitted(store, "bob")
    for charge_id in ("a", "b", "a", None, None):
        await store.charge(job, 10, 0, 1, charge_id=charge_id)
    # "a" once, "b" once, and every charge without an id.
    assert await store.spent(job) == (4, 40)


async def test_a_deleted_jobs_charge_is_applied_once_too(store: RedisJobStore) -> None:
    job = await submitted(store, "carol")
    assert await store.transition(job, "cancelled", ("queued",), event="job.cancelled")
    assert await store.remove_job(job)
    for _ in range(2):
        assert await store.charge(job, 50, 10, 1, charge_id="late-reply")
    assert (await store.usage("carol", usage_day())).tokens == 60

"""A knowledge-pool cache hit is not observable by timing: a worker holds a cached pool back until a
fresh one would have been ready, so ``pool.ready`` of a cache hit comes no sooner than a miss's.

Real redis-server and the scripted LLM; the pool builder is a stand-in for the retriever client that
takes 0.6 s for a fresh pool and answers a repeated question from its cache at once.
"""

from __future__ import annotations

import asyncio

import pytest

from debate_worker.job_runner import JobRunner
from debate_worker.pool_timing import PoolTiming
from services.jobstore import RedisJobStore, new_id
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from services.knowledge import KnowledgeItem, KnowledgePool
from tests.api.support import RedisServer
from tests.debate_worker.test_tasks import Models, new_job, runtime
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

FRESH_S = 0.6


class CachingBuilder:
    """Builds a pool in ``FRESH_S``; the same question again comes from the cache at once."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        cached = question in self.seen
        if not cached:
            await asyncio.sleep(FRESH_S)
            self.seen.add(question)
        items = [KnowledgeItem(n=1, source="wikipedia", title="France", text="Paris is the capital.")]
        return KnowledgePool(pool_id="p", question=question, items=items, cached=cached)

    async def aclose(self) -> None:
        return None


async def pool_delay(store: RedisJobStore, job_id: str) -> float:
    """Seconds from the job's start to its pool.ready event (the stream id's millisecond clock)."""
    job = await store.get_job(job_id)
    assert job is not None and job.started_at is not None
    ready = next(e for e in await store.read_events(job_id, count=100) if e.type == "pool.ready")
    assert "cached" not in ready.data and "timings_ms" not in ready.data
    return int(ready.id.split("-")[0]) / 1000 - job.started_at


async def test_a_cache_hit_arrives_no_sooner_than_a_fresh_pool(redis_server: RedisServer) -> None:
    store = RedisJobStore.from_url(redis_server.url, prefix=f"pt{new_id('p')[-8:]}", ttl_s=DEFAULT_JOB_TTL_S)
    builder = CachingBuilder()
    with ScriptedLLM() as llm:
        llm.on("", "The answer is [Paris].")
        rt = runtime(redis_server.url)
        rt.models_factory = lambda: Models(llm.base_url)
        rt.pool_factory = lambda: builder
        rt.pool_timing = PoolTiming(default_s=0.0)
        try:
            delays: dict[str, float] = {}
            for name in ("fresh", "cached"):  # another key asks the same question second
                job_id = await new_job(store, knowledge="all", protocol="rag")
                assert await JobRunner(rt, store).execute(job_id) == "completed"
                delays[name] = await pool_delay(store, job_id)
                result = await store.get_result(job_id)
                assert result is not None and "cached" not in result["pool"]
        finally:
            await store.aclose()
    assert delays["fresh"] >= FRESH_S
    assert delays["cached"] >= 0.9 * delays["fresh"], delays


def test_the_hold_back_is_the_median_of_recent_fresh_builds() -> None:
    timing = PoolTiming(default_s=2.0, window=3)
    assert timing.hold_back(0.5) == 1.5  # nothing built yet: the default
    for seconds in (1.0, 9.0, 3.0, 4.0):  # the window keeps the last three
        timing.record(seconds)
    assert timing.typical() == 4.0
    assert timing.hold_back(5.0) == 0.0

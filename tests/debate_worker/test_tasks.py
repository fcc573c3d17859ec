"""The job runner behind the Celery task, against a real redis-server and the scripted LLM server.

Celery is left out here on purpose: these tests pin down what makes redelivery safe (one result per
job, resume from the last checkpoint, the attempt cap, the lease) without a broker's timing in the
way. ``tests/api/test_redelivery.py`` does the same through a real worker killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from debate_worker.job_runner import JobRunner
from debate_worker.runtime import WorkerRuntime
from debate_worker.worker_settings import WorkerSettings
from services.chat_model import ChatCompletion, ChatMessage
from services.jobstore import JobRecord, RedisJobStore, new_id
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient
from services.llm.settings import LLMSettings
from services.settings import RetrieverClientSettings
from tests.api.support import JUDGE, RedisServer, script_agreeing
from tests.support.scripted_llm import ScriptedLLM, free_port, request_text

pytestmark = pytest.mark.integration


class WorkerLost(BaseException):
    """Stands in for SIGKILL: escapes every ``except Exception`` like a dead process would."""


class Models:
    """Role models over the scripted server that can 'die' on a given call number."""

    def __init__(self, base_url: str, crash_on_call: int | None = None) -> None:
        self.client = OpenAIChatClient(base_url, "scripted", structured_mode="off")
        self.calls = 0
        self.crash_on_call = crash_on_call

    def for_role(self, role: str, agent: int | None = None) -> Any:
        return self

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def endpoint(self) -> str:
        return self.client.endpoint

    async def complete(self, messages: Sequence[ChatMessage], **kw: Any) -> ChatCompletion:
        self.calls += 1
        if self.crash_on_call is not None and self.calls >= self.crash_on_call:
            raise WorkerLost
        return await self.client.complete(messages, **kw)

    async def aclose(self) -> None:
        await self.client.aclose()


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisJobStore]:
    s = RedisJobStore.from_url(redis_server.url, prefix=f"t{new_id('p')[-8:]}", ttl_s=DEFAULT_JOB_TTL_S)
    yield s
    await s.aclose()


def runtime(redis_url: str, models: Any = None, **settings: Any) -> WorkerRuntime:
    values: dict[str, Any] = {"redis_url": redis_url, "lease_ttl_s": 1.0, "max_attempts": 3}
    values.update(settings)
    rt = WorkerRuntime(WorkerSettings(**values), LLMSettings(), RetrieverClientSettings())
    if models is not None:
        rt.models_factory = lambda: models
    return rt


async def new_job(store: RedisJobStore, **config: Any) -> str:
    job = JobRecord(
        job_id=new_id("job"),
        owner="t",
        question="What is the capital of France?",
        config={"knowledge": "none", **config},
    )
    await store.create_jobs([job])
    return job.job_id


async def event_types(store: RedisJobStore, job_id: str) -> list[str]:
    return [e.type for e in await store.read_events(job_id, count=1000)]


async def test_completes_once_and_redelivery_is_a_no_op(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    rt = runtime(redis_server.url, Models(llm.base_url))
    job_id = await new_job(store)
    assert await JobRunner(rt, store).execute(job_id) == "completed"
    result = await store.get_result(job_id)
    assert result is not None and result["answer"] == "Paris"
    calls = len(llm.requests)
    assert await JobRunner(rt, store).execute(job_id) == "skipped:completed"
    assert len(llm.requests) == calls
    types = await event_types(store, job_id)
    assert types.count("job.completed") == 1
    assert types[:2] == ["job.queued", "pool.ready"]
    job = await store.get_job(job_id)
    assert job is not None and job.attempts == 1 and await store.active_count("t") == 0


async def test_crash_mid_debate_resumes_from_last_checkpoint(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    llm.reset()
    script_agreeing(llm)
    llm.on(JUDGE, "They disagree. [No]")
    llm.rules.insert(0, llm.rules.pop())
    job_id = await new_job(store, rounds=3)
    # Round 1 is 3 calls (2 debaters + judge); die in round 2 after its checkpoint was written.
    with pytest.raises(WorkerLost):
        await JobRunner(runtime(redis_server.url, Models(llm.base_url, crash_on_call=5)), store).execute(
            job_id
        )
    job = await store.get_job(job_id)
    assert job is not None and job.status == "debating" and job.round == 1
    ckpt = await store.load_checkpoint(job_id)
    assert ckpt is not None and ckpt["checkpoint"]["round"] == 1

    before = len(llm.requests)
    second = Models(llm.base_url)
    assert await JobRunner(runtime(redis_server.url, second), store).execute(job_id) == "completed"
    assert second.calls == 2 * 3 + 1  # rounds 2 and 3, then the summary: round 1 was not repeated
    assert len(llm.requests) - before == 7
    result = await store.get_result(job_id)
    assert result is not None and result["rounds"] == 3
    per_round = [r["round"] for r in result["transcript"] if r["role"] == "debater"]
    assert sorted(per_round) == [1, 1, 2, 2, 3, 3]
    job = await store.get_job(job_id)
    assert job is not None and job.attempts == 2
    assert (await event_types(store, job_id)).count("job.completed") == 1


async def test_attempt_cap_fails_the_job(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    job_id = await new_job(store)
    await store.redis.hset(store.k_job(job_id), "attempts", 3)
    assert await JobRunner(runtime(redis_server.url, Models(llm.base_url)), store).execute(job_id) == "failed"
    job = await store.get_job(job_id)
    assert job is not None and job.status == "failed" and "gave up after 3 attempts" in (job.error or "")
    assert (await event_types(store, job_id))[-1] == "job.failed"


async def test_lease_of_a_live_worker_blocks_a_duplicate_and_a_dead_one_expires(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    rt = runtime(redis_server.url, Models(llm.base_url), lease_ttl_s=0.6)
    job_id = await new_job(store)
    await store.acquire_lease(job_id, "other-worker", 10_000)  # alive: holds it for 10 s
    assert await JobRunner(rt, store).execute(job_id) == "skipped:leased"
    job = await store.get_job(job_id)
    assert job is not None and job.status == "queued"

    await store.redis.delete(store.k_lease(job_id))
    await store.acquire_lease(job_id, "dead-worker", 400)  # a killed worker's lease runs out
    assert await JobRunner(rt, store).execute(job_id) == "completed"


async def test_cancel_stops_a_running_debate(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    llm.latency_s = 0.1
    llm.on(JUDGE, "[No]")
    llm.rules.insert(0, llm.rules.pop())
    job_id = await new_job(store, rounds=10)
    task = asyncio.create_task(
        JobRunner(runtime(redis_server.url, Models(llm.base_url)), store).execute(job_id)
    )
    for _ in range(200):  # poll the store (another process's view) until round 1 is done
        job = await store.get_job(job_id)
        if job is not None and job.round >= 1:
            break
        await asyncio.sleep(0.05)
    assert await store.transition(
        job_id, "cancelled", ("queued", "retrieving", "debating"), event="job.cancelled"
    )
    outcome = await asyncio.wait_for(task, timeout=5)
    assert outcome == "skipped:cancelled"
    assert await store.get_result(job_id) is None
    types = await event_types(store, job_id)
    assert types[-1] == "job.cancelled" and "job.completed" not in types


async def test_retriever_down_fails_with_reason(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM, tmp_path: Path
) -> None:
    rt = runtime(redis_server.url, Models(llm.base_url))
    rt.retriever = RetrieverClientSettings(url=f"http://127.0.0.1:{free_port()}", client_max_attempts=2)
    job_id = await new_job(store, knowledge="all")
    assert await JobRunner(rt, store).execute(job_id) == "failed"
    job = await store.get_job(job_id)
    assert job is not None and job.error is not None and "retriever" in job.error.lower()
    assert not llm.requests  # no debate without its knowledge


async def test_invalid_stored_config_fails_cleanly(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    job_id = await new_job(store, protocol="nonsense")
    assert await JobRunner(runtime(redis_server.url, Models(llm.base_url)), store).execute(job_id) == "failed"
    job = await store.get_job(job_id)
    assert job is not None and "invalid config" in (job.error or "")


async def test_an_agent_url_that_resolves_to_this_network_is_refused_where_it_is_dialled(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    """The gateway checks a client URL as written; a name passes it. The worker's own role models
    (no stand-in) resolve the name when they dial it: this machine's name, resolved by the system to
    one of its own addresses, is refused unless the operator listed that network."""
    host = socket.gethostname()
    try:
        address = ipaddress.ip_address(socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)[0][4][0])
    except OSError:
        pytest.skip(f"{host!r} does not resolve here")
    if address.is_global:
        pytest.skip(f"{host!r} resolves to a public address here")
    with ScriptedLLM(host="0.0.0.0") as internal:
        script_agreeing(internal)
        team = [{"base_url": f"http://{host}:{internal.port}/v1", "model": "m"}, {}]
        llm_settings = LLMSettings(base_url=llm.base_url, model="scripted", structured_output="off")

        def worker(networks: list[str]) -> WorkerRuntime:
            settings = WorkerSettings(
                redis_url=redis_server.url, lease_ttl_s=1.0, client_url_networks=networks
            )
            return WorkerRuntime(settings, llm_settings, RetrieverClientSettings())

        refused = await new_job(store, team=team)
        assert await JobRunner(worker([]), store).execute(refused) == "failed"
        job = await store.get_job(refused)
        assert job is not None and "LLMEgressRefused" in (job.error or "")
        assert f"{host!r} resolves to a non-public address" in (job.error or "")
        assert internal.requests == []

        listed = await new_job(store, team=team)
        assert (
            await JobRunner(worker([f"{address}/{address.max_prefixlen}"]), store).execute(listed)
            == "completed"
        )
        assert internal.requests and internal.hosts[0] == f"{host}:{internal.port}"


# -- search_query=passage: the passage is written once per job, charged, recorded ----------------------

ASKS_PASSAGE = "Write two or three sentences from a Wikipedia article"
PASSAGE = "Paris is the capital and largest city of France."
PASSAGE_CONFIG = {"knowledge": "wikipedia", "k_wiki": 1, "k_web": 0, "search_query": "passage"}


class RecordingPools:
    """A ``PoolBuilder`` (the protocol the worker speaks to the retriever's client): one item, and the
    search text of every build."""

    def __init__(self) -> None:
        self.search_texts: list[str | None] = []

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        self.search_texts.append(search_text)
        items = [
            KnowledgeItem(n=1, source="wikipedia", title="Paris", text="Paris is the capital of France.")
        ]
        return KnowledgePool(pool_id=f"pool-{len(self.search_texts)}", question=question, items=items)

    async def aclose(self) -> None:
        return None


def script_passage(llm: ScriptedLLM) -> None:
    llm.reset()
    script_agreeing(llm)
    llm.on(ASKS_PASSAGE, PASSAGE)
    llm.rules.insert(0, llm.rules.pop())  # before the debaters' "Question:" rule, which it would match


def passage_requests(llm: ScriptedLLM) -> int:
    return sum(ASKS_PASSAGE in request_text(b) for b in llm.requests)


async def test_the_passage_is_written_once_even_when_the_worker_dies_after_it(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    script_passage(llm)
    pools = RecordingPools()
    job_id = await new_job(store, **PASSAGE_CONFIG)
    # Call 1 writes the passage, call 2 (the first selection) dies before it is sent.
    crashing = runtime(redis_server.url, Models(llm.base_url, crash_on_call=2))
    crashing.pool_factory = lambda: pools
    with pytest.raises(WorkerLost):
        await JobRunner(crashing, store).execute(job_id)
    assert passage_requests(llm) == 1 and pools.search_texts == [PASSAGE]
    ckpt = await store.load_checkpoint(job_id)
    assert ckpt is not None and ckpt["checkpoint"] is None and ckpt["search"]["role"] == "search"

    second = Models(llm.base_url)
    rt = runtime(redis_server.url, second)
    rt.pool_factory = lambda: pools
    assert await JobRunner(rt, store).execute(job_id) == "completed"
    assert passage_requests(llm) == 1  # not written again: the checkpoint's passage is searched
    assert pools.search_texts == [PASSAGE, PASSAGE]
    result = await store.get_result(job_id)
    assert result is not None and result["answer"] == "Paris"
    roles = [r["role"] for r in result["transcript"]]
    assert roles[0] == "search" and roles.count("search") == 1
    assert result["transcript"][0]["extra"]["search_text"] == PASSAGE
    assert result["usage_by_role"]["search"]["calls"] == 1
    # The job was charged each call once: the passage (first attempt) and the debate (second).
    usage = result["usage"]
    assert await store.spent(job_id) == (
        usage["calls"],
        usage["prompt_tokens"] + usage["completion_tokens"],
    )
    assert usage["calls"] == len(llm.requests) == second.calls + 1


async def test_a_resumed_round_keeps_the_search_record(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    script_passage(llm)
    llm.on(JUDGE, "They disagree. [No]")
    llm.rules.insert(0, llm.rules.pop())
    pools = RecordingPools()
    job_id = await new_job(store, rounds=2, **PASSAGE_CONFIG)
    # passage, round 1 (2 selections, 2 debaters, judge), then die in round 2
    crashing = runtime(redis_server.url, Models(llm.base_url, crash_on_call=8))
    crashing.pool_factory = lambda: pools
    with pytest.raises(WorkerLost):
        await JobRunner(crashing, store).execute(job_id)
    ckpt = await store.load_checkpoint(job_id)
    assert ckpt is not None and ckpt["checkpoint"]["round"] == 1 and ckpt["search"] is not None
    rt = runtime(redis_server.url, Models(llm.base_url))
    rt.pool_factory = lambda: pools
    assert await JobRunner(rt, store).execute(job_id) == "completed"
    assert passage_requests(llm) == 1 and pools.search_texts == [PASSAGE]  # pool from the checkpoint
    result = await store.get_result(job_id)
    assert result is not None
    assert [r["role"] for r in result["transcript"]].count("search") == 1
    assert result["transcript"][0]["role"] == "search"


async def test_a_failed_passage_leaves_the_question_alone_and_the_job_runs(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    script_passage(llm)
    llm.fail_next(400)
    pools = RecordingPools()
    rt = runtime(redis_server.url, Models(llm.base_url))
    rt.pool_factory = lambda: pools
    job_id = await new_job(store, **PASSAGE_CONFIG)
    assert await JobRunner(rt, store).execute(job_id) == "completed"
    assert pools.search_texts == [None]
    result = await store.get_result(job_id)
    assert result is not None and result["answer"] == "Paris"
    assert "search" not in [r["role"] for r in result["transcript"]]
    assert any("search passage failed (" in w for w in result["pool"]["warnings"])
    calls, tokens = await store.spent(job_id)
    usage = result["usage"]
    assert (calls, tokens) == (usage["calls"], usage["prompt_tokens"] + usage["completion_tokens"])


async def test_a_worker_without_the_mode_fails_the_job_naming_it(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    script_passage(llm)
    rt = runtime(redis_server.url, Models(llm.base_url), search_query_modes=["question"])
    rt.pool_factory = RecordingPools
    job_id = await new_job(store, **PASSAGE_CONFIG)
    assert await JobRunner(rt, store).execute(job_id) == "failed"
    job = await store.get_job(job_id)
    assert job is not None and "search_query 'passage' is not enabled on this worker" in (job.error or "")
    assert llm.requests == []


async def test_a_given_pool_writes_no_passage(
    redis_server: RedisServer, store: RedisJobStore, llm: ScriptedLLM
) -> None:
    script_passage(llm)
    rt = runtime(redis_server.url, Models(llm.base_url))
    job = JobRecord(
        job_id=new_id("job"),
        owner="t",
        question="What is the capital of France?",
        config=PASSAGE_CONFIG,
        pool=[{"source": "wikipedia", "title": "Paris", "text": "Paris is the capital of France."}],
    )
    await store.create_jobs([job])
    assert await JobRunner(rt, store).execute(job.job_id) == "completed"
    assert passage_requests(llm) == 0

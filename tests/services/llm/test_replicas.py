"""Several servers of one model behind one endpoint, against real scripted servers on sockets.

What must hold: calls spread over the healthy replicas by least outstanding requests; a dead replica
(nothing listens) and a slow one (read timeout) are taken out and the call is answered by another;
one debate's calls stay on one replica while it is healthy and move for good when it fails; a
replica that recovers is probed by a real call after its cool-down; the usage a debate reports is
exactly what the servers that answered served.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from engine.config import DebateConfig
from engine.runner import run_debate
from services.chat_model import ChatMessage, LLMUnavailable
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient, RetryPolicy
from services.llm.factory import RoleModelsFromSettings
from services.llm.replicas import (
    REPLICA_HEALTH,
    ReplicaRegistry,
    ReplicaSet,
    affinity,
    affinity_key,
    split_base_urls,
)
from services.llm.settings import LLMSettings
from services.observability.logging_setup import job_log_context
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = pytest.mark.unit

MSG: list[ChatMessage] = [{"role": "user", "content": "What is the capital of France?"}]


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture(autouse=True)
def _fresh_health() -> Iterator[None]:
    # Health is process-wide per URL; ports are reused between tests.
    REPLICA_HEALTH.clear()
    yield
    REPLICA_HEALTH.clear()


@pytest.fixture
def pair() -> Iterator[tuple[ScriptedLLM, ScriptedLLM]]:
    with ScriptedLLM(latency_s=0.2) as a, ScriptedLLM(latency_s=0.2) as b:
        yield a, b


def client(urls: list[str], **kwargs: Any) -> OpenAIChatClient:
    kwargs.setdefault("sleep", no_sleep)
    kwargs.setdefault("retry", RetryPolicy(max_attempts=4, backoff_base_s=0.01))
    return OpenAIChatClient(urls, "scripted", **kwargs)


async def test_calls_spread_by_least_outstanding(pair: tuple[ScriptedLLM, ScriptedLLM]) -> None:
    a, b = pair
    async with client([a.base_url, b.base_url], max_concurrency=8) as llm:
        await asyncio.gather(*(llm.complete(MSG) for _ in range(8)))
    assert len(a.requests) == 4 and len(b.requests) == 4
    assert a.max_in_flight == 4 and b.max_in_flight == 4


async def test_a_busy_replica_gets_the_next_call_elsewhere() -> None:
    with ScriptedLLM(latency_s=1.0) as slow, ScriptedLLM(latency_s=0.05) as fast:
        async with client([slow.base_url, fast.base_url]) as llm:
            # One long call holds the first replica; the calls after it go where nothing waits.
            first = asyncio.ensure_future(llm.complete(MSG))
            await asyncio.sleep(0.1)
            for _ in range(5):
                await llm.complete(MSG)
            await first
    assert len(slow.requests) == 1 and len(fast.requests) == 5


async def test_a_dead_replica_is_taken_out_and_calls_succeed() -> None:
    with ClosedPort() as dead, ScriptedLLM() as live:
        async with client([dead.url + "/v1", live.base_url]) as llm:
            results = [await llm.complete(MSG) for _ in range(6)]
            state = llm.replicas.snapshot()
    assert all(r.text for r in results)
    assert len(live.requests) == 6
    # At most the first call tried the dead port; after that it is out (cooling down).
    assert sum(r.attempts for r in results) <= 7
    assert state[0]["healthy"] is False and state[0]["failures"] == 1 and state[1]["healthy"] is True


async def test_all_replicas_dead_fails_as_with_one_url() -> None:
    with ClosedPort() as one, ClosedPort() as two:
        async with client([one.url, two.url]) as llm:
            with pytest.raises(LLMUnavailable):
                await llm.complete(MSG)


async def test_a_slow_replica_times_out_and_the_call_fails_over() -> None:
    with ScriptedLLM(latency_s=3.0) as slow, ScriptedLLM(latency_s=0.0) as fast:
        async with client([slow.base_url, fast.base_url], timeout_s=1.5) as llm:
            with affinity("debate-1"):
                # Bind the debate to the slow replica first (its rank may say otherwise).
                llm.replicas._bind("debate-1", llm.replicas.urls[0])
                out = await llm.complete(MSG)
                again = await llm.complete(MSG)
            state = llm.replicas.snapshot()
    assert out.attempts == 2 and again.attempts == 1
    assert len(slow.requests) == 1 and len(fast.requests) == 2
    assert state[0]["healthy"] is False
    # Usage is the answering replica's: the cut-off attempt reported nothing and is not counted.
    assert out.prompt_tokens + out.completion_tokens + again.prompt_tokens + again.completion_tokens == (
        fast.tokens_served
    )


async def test_one_debate_stays_on_one_replica_and_debates_spread(
    pair: tuple[ScriptedLLM, ScriptedLLM],
) -> None:
    a, b = pair
    async with client([a.base_url, b.base_url]) as llm:
        for _ in range(5):
            with affinity("debate-x"):
                await llm.complete(MSG)
        one = len(a.requests), len(b.requests)
        assert sorted(one) == [0, 5]
        for i in range(32):  # 32 debates, one call each: both replicas get some
            with affinity(f"debate-{i}"):
                await llm.complete(MSG)
    assert len(a.requests) > one[0] and len(b.requests) > one[1]


async def test_the_job_id_of_the_log_context_is_the_affinity_key() -> None:
    assert affinity_key() is None
    with job_log_context("job-123"):
        assert affinity_key() == "job-123"
        with affinity("explicit"):
            assert affinity_key() == "explicit"


async def test_fail_over_mid_debate_moves_the_debate_for_good() -> None:
    with ScriptedLLM() as a, ScriptedLLM() as b:
        async with client([a.base_url, b.base_url], replica_cooldown_s=0.3) as llm:
            with affinity("debate-7"):
                await llm.complete(MSG)
                home = llm.replicas.bound("debate-7")
                home_server, other = (a, b) if home == llm.replicas.urls[0] else (b, a)
                home_server.fail_next(503)
                failed_over = await llm.complete(MSG)
                assert failed_over.attempts == 2
                moved = llm.replicas.bound("debate-7")
                assert moved != home
                await asyncio.sleep(0.4)  # the cool-down has passed: the old home would be probed
                for _ in range(3):
                    await llm.complete(MSG)
            assert llm.replicas.bound("debate-7") == moved
            # A call without affinity probes the recovered replica and takes it back.
            await asyncio.gather(*(llm.complete(MSG) for _ in range(2)))
            assert all(s["healthy"] for s in llm.replicas.snapshot())
    assert len(home_server.requests) == 1 + 1 + 1  # first call, the 503, the probe
    assert len(other.requests) == 1 + 3 + 1


def test_cool_down_doubles_and_a_probe_is_one_call_at_a_time() -> None:
    now = [100.0]
    replicas = ReplicaSet(["http://a:1", "http://b:1"], cooldown_s=2, cooldown_max_s=5, clock=lambda: now[0])
    a, b = replicas.urls
    assert replicas.pick() in (a, b)
    replicas.release(a, "ok")  # whichever it was, nothing is in flight on a now
    replicas.release(b, "ok")
    url = replicas.pick(avoid=[b])
    assert url == a
    replicas.release(a, "failed")
    assert [replicas.pick() for _ in range(3)] == [b, b, b]
    now[0] += 2.0  # cool-down over: the next call probes a, and only one call
    assert replicas.pick() == a
    assert replicas.pick() == b
    replicas.release(a, "failed")  # the probe failed: out for 4 s now
    now[0] += 3.9
    assert replicas.pick() == b
    now[0] += 0.1
    assert replicas.pick() == a
    replicas.release(a, "failed")  # third failure: 8 s, capped at 5
    now[0] += 5.0
    assert replicas.pick() == a
    replicas.release(a, "ok")
    assert replicas.snapshot()[0]["healthy"] is True


def test_a_full_bound_replica_spills_a_call_but_keeps_the_debate() -> None:
    replicas = ReplicaSet(["http://a:1", "http://b:1"], limit=2)
    a, b = replicas.urls
    replicas._bind("d", a)
    assert replicas.pick("d") == a
    assert replicas.pick("d") == a
    assert replicas.pick("d") == b  # a has 2 in flight (its limit), b has room
    assert replicas.bound("d") == a


def test_settings_validate_lists_of_replicas() -> None:
    s = LLMSettings(base_url="http://a:8000/v1, http://b:8000/v1")
    assert split_base_urls(s.base_url or "") == ("http://a:8000/v1", "http://b:8000/v1")
    for bad in ("http://a,http://a/v1", "http://a,,http://b", "file:///x", "http://a, ftp://b"):
        with pytest.raises(ValidationError):
            LLMSettings(base_url=bad)
    with pytest.raises(ValidationError):
        LLMSettings(endpoints={"big": {"base_url": "http://a,nope", "model": "m"}})
    with pytest.raises(ValidationError):
        LLMSettings(judge={"base_url": "http://a,http://a"})


async def test_keys_go_to_every_replica_of_their_endpoint_only(
    pair: tuple[ScriptedLLM, ScriptedLLM],
) -> None:
    a, b = pair
    settings = LLMSettings(
        base_url=f"{a.base_url},{b.base_url}", api_key="sk-replicas", model="m", structured_output="off"
    )
    models = RoleModelsFromSettings(settings)
    try:
        llm = models.for_role("debater")
        await asyncio.gather(*(llm.complete(MSG) for _ in range(4)))
        # A client-given URL is one URL even when it holds a comma, and never gets the key.
        agent = models.agent_client("debater", base_url=f"{a.base_url},{b.base_url}")
        assert len(agent.replicas) == 1  # type: ignore[attr-defined]
        # A client naming one replica's exact URL is sent the key configured with it.
        one = models.agent_client("debater", base_url=b.base_url)
        await one.complete(MSG)
    finally:
        await models.aclose()
    assert a.authorizations and b.authorizations
    assert set(a.authorizations + b.authorizations) == {"Bearer sk-replicas"}


POOL = KnowledgePool(
    pool_id="p",
    question="Who painted the Mona Lisa?",
    items=[KnowledgeItem(n=1, source="wikipedia", title="Mona Lisa", text="Painted by Leonardo da Vinci.")],
)


def script(llm: ScriptedLLM) -> None:
    llm.on("select knowledge from the knowledge pool", "[1]")
    llm.on("respond with [Yes]", ["[No]", "[Yes]"])
    llm.on("summarize the final answer", "[Leonardo da Vinci]")
    llm.on("Question:", "The answer is [Leonardo da Vinci].")


async def test_debate_usage_is_exact_over_replicas_with_a_failure() -> None:
    with ClosedPort() as dead, ScriptedLLM() as a, ScriptedLLM() as b:
        script(a)
        script(b)
        a.fail_next(500)
        b.fail_next(502)
        settings = LLMSettings(
            base_url=f"{dead.url},{a.base_url},{b.base_url}",
            model="m",
            structured_output="off",
            backoff_base_s=0.01,
            max_attempts=6,
        )
        models = RoleModelsFromSettings(settings)
        config = DebateConfig(prompt_style="paper", judge="llm", rounds=3)
        try:
            results = await asyncio.gather(*(_debate(models, config, f"job-{i}") for i in range(4)))
        finally:
            await models.aclose()
        served = a.tokens_served + b.tokens_served
    reported = sum(r.usage.prompt_tokens + r.usage.completion_tokens for r in results)
    recorded = sum(rec.prompt_tokens + rec.completion_tokens for r in results for rec in r.transcript)
    assert all(r.answer == "Leonardo da Vinci" for r in results)
    assert reported == recorded == served
    assert sum(r.usage.calls for r in results) == len(a.requests) + len(b.requests) - 2


async def _debate(models: RoleModelsFromSettings, config: DebateConfig, job: str) -> Any:
    with job_log_context(job):
        return await run_debate(POOL.question, POOL, config, models)


def test_a_new_debate_avoids_the_replica_other_processes_load() -> None:
    # Nothing of this process in flight anywhere, but a's replies have been slow lately (others'
    # load on it): new debates start on b. Reply times within the noise margin count as equal.
    def starts(replicas: ReplicaSet) -> set[str]:
        picked = set()
        for k in range(40):
            url = replicas.pick(f"debate-{k}")
            replicas.release(url, "cancelled")
            picked.add(url)
        return picked

    slow = ReplicaSet(["http://a:1", "http://b:1"])
    slow._states[0].ewma_s, slow._states[1].ewma_s = 1.0, 0.2
    assert starts(slow) == {slow.urls[1]}
    even = ReplicaSet(["http://c:1", "http://d:1"])
    even._states[0].ewma_s, even._states[1].ewma_s = 0.21, 0.2
    assert starts(even) == set(even.urls)


def test_a_debate_leaves_a_replica_that_replies_much_slower() -> None:
    replicas = ReplicaSet(["http://a:1", "http://b:1"])
    a, b = replicas.urls
    replicas._bind("d", a)
    replicas._states[0].ewma_s, replicas._states[1].ewma_s = 0.4, 0.3  # noise: it stays
    assert replicas.pick("d") == a
    replicas.release(a, "cancelled")
    replicas._states[0].ewma_s = 1.0  # crowded by other processes: it moves, for good
    assert replicas.pick("d") == b and replicas.bound("d") == b


class SeenLoad:
    """Other processes' calls in flight as a ``SharedReplicaLoad`` reports them (set by the test)."""

    def __init__(self, others: dict[str, int] | None) -> None:
        self.view = others
        self.published: list[dict[str, int]] = []

    def publish(self, counts: Mapping[str, int]) -> None:
        self.published.append(dict(counts))

    def others(self) -> Mapping[str, int] | None:
        return self.view


def test_with_shared_counts_a_debate_starts_on_the_least_loaded_replica() -> None:
    seen = SeenLoad(None)
    replicas = ReplicaSet(["http://a:1", "http://b:1", "http://c:1"], registry=ReplicaRegistry(seen))
    a, b, c = replicas.urls
    seen.view = {a: 3, b: 1, c: 2}
    for k in range(20):  # whatever the key ranks first
        assert replicas.pick(f"debate-{k}") == b
        replicas.release(b, "cancelled")
    seen.view = {a: 1, b: 1, c: 1}  # all equal: the key's own order, so debates spread
    starts = set()
    for k in range(30):
        url = replicas.pick(f"new-{k}")
        replicas.release(url, "cancelled")
        starts.add(url)
    assert starts == {a, b, c}
    # Every change of this process's counts was published (the last: nothing in flight at b).
    assert seen.published[0] == {a: 0, b: 1, c: 0} and seen.published[1] == {a: 0, b: 0, c: 0}


def test_with_shared_counts_a_crowded_replica_spills_a_call_but_keeps_the_debate() -> None:
    seen = SeenLoad({})
    replicas = ReplicaSet(["http://a:1", "http://b:1"], registry=ReplicaRegistry(seen), limit=4)
    a, b = replicas.urls
    replicas._bind("d", a)
    seen.view = {a: 1}  # one call of another process more: not worth leaving the cached prefix
    assert replicas.pick("d") == a
    replicas.release(a, "ok")
    seen.view = {a: 2}  # two more than b (spill_gap): this call goes to b, the debate stays on a
    assert replicas.pick("d") == b and replicas.bound("d") == a
    replicas.release(b, "ok")
    seen.view = {a: 2, b: 1}
    assert replicas.pick("d") == a
    replicas.release(a, "ok")
    seen.view = None  # the counts are not known now: this process's own decide, as without sharing
    assert replicas.pick("d") == a
    never = ReplicaSet(
        ["http://a:1", "http://b:1"], registry=ReplicaRegistry(SeenLoad({a: 9})), spill_gap=None
    )
    never._bind("d", a)
    assert never.pick("d") == a


def test_a_failing_sharing_leaves_the_local_counts() -> None:
    class Broken:
        def publish(self, counts: Mapping[str, int]) -> None:
            raise RuntimeError("store gone")

        def others(self) -> Mapping[str, int] | None:
            raise RuntimeError("store gone")

    replicas = ReplicaSet(["http://a:1", "http://b:1"], registry=ReplicaRegistry(Broken()))
    picked = [replicas.pick() for _ in range(4)]
    assert sorted(picked) == sorted(replicas.urls * 2)  # least outstanding, this process's
    for url in picked:
        replicas.release(url, "ok", 0.1)
    assert all(s["load"] == 0 for s in replicas.snapshot())

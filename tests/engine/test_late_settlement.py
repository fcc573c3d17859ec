"""A timed-out call is charged what the server served, not its worst case, when the server answers
within the client's grace: against scripted servers on real sockets, whole debates through
``run_debate``.

What must hold, summed over what the usage sink was told: a call answered after the deadline but
within the grace is charged exactly what the server reported; one not answered within the grace keeps
its worst case (its request cut); no grace keeps the worst case at once, as before; a call that timed
out on one replica and was answered by another is charged both served attempts, each exactly once and
as one call; a debate cancelled while such replies are still due is settled all the same, or left at
the worst case, never lost and never charged twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from engine.budget import CallBudget, prompt_token_bound
from engine.config import DebateConfig
from engine.context import SingleModel
from engine.runner import run_debate
from services.chat_model import LLMTimeout
from services.llm.client import OpenAIChatClient, RetryPolicy
from services.llm.replicas import REPLICA_HEALTH, affinity
from services.observability.metrics import LLM_LATE_SETTLEMENTS
from tests.engine.test_budgets import POOL, script
from tests.engine.usage_sink import Sink
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit

MAX_TOKENS = 32


@pytest.fixture(autouse=True)
def _fresh_health() -> Iterator[None]:
    REPLICA_HEALTH.clear()  # replica health is process-wide per URL; ports are reused
    yield
    REPLICA_HEALTH.clear()


def config(**kw: Any) -> DebateConfig:
    base: dict[str, Any] = {"protocol": "self_consistency", "samples": 2, "max_tokens": MAX_TOKENS}
    return DebateConfig(prompt_style="paper", **{**base, **kw})


async def debate(llm: OpenAIChatClient, sink: Sink, cfg: DebateConfig | None = None) -> Any:
    try:
        return await run_debate(POOL.question, POOL, cfg or config(), SingleModel(llm), on_usage=sink)
    finally:
        await llm.aclose()


def worst(server: ScriptedLLM) -> int:
    return prompt_token_bound(server.requests[0]["messages"]) + MAX_TOKENS


def late_outcomes() -> dict[str, float]:
    """``parley_llm_late_settlements`` by outcome, all roles and endpoints summed."""
    totals = {"served": 0.0, "refused": 0.0, "worst_case": 0.0}
    for metric in LLM_LATE_SETTLEMENTS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                totals[sample.labels["outcome"]] += sample.value
    return totals


async def test_a_call_answered_within_the_grace_is_charged_what_the_server_served() -> None:
    before = late_outcomes()
    with ScriptedLLM(latency_s=1.0) as server:
        script(server)
        sink = Sink()
        llm = OpenAIChatClient(server.base_url, "scripted", structured_mode="off", timeout_s=0.4)
        started = time.monotonic()
        with pytest.raises(LLMTimeout):
            await debate(llm, sink)
        took = time.monotonic() - started
    # Both samples timed out at the deadline; the debate ended once their replies had come.
    assert len(server.requests) == 2 and took < 3.0
    assert sink.tokens == server.tokens_served < 2 * worst(server)
    assert sink.calls == 2
    after = late_outcomes()
    assert after["served"] - before["served"] == 2 and after["worst_case"] == before["worst_case"]


async def test_a_call_not_answered_within_the_grace_keeps_its_worst_case() -> None:
    with ScriptedLLM(latency_s=2.0) as server:
        script(server)
        gone: list[bool] = []
        server.on_served = lambda body, tokens, client_gone, took_s: gone.append(client_gone)
        sink = Sink()
        llm = OpenAIChatClient(
            server.base_url, "scripted", structured_mode="off", timeout_s=0.3, timeout_grace_s=0.5
        )
        with pytest.raises(LLMTimeout):
            await debate(llm, sink)
        assert sink.tokens == 2 * worst(server) and sink.calls == 2
        for _ in range(300):  # the server finishes its work after the client cut the requests
            if len(gone) == 2:
                break
            await asyncio.sleep(0.01)
    assert gone == [True, True]


async def test_no_grace_keeps_the_worst_case_at_the_deadline_as_before() -> None:
    with ScriptedLLM(latency_s=1.0) as server:
        script(server)
        sink = Sink()
        llm = OpenAIChatClient(
            server.base_url, "scripted", structured_mode="off", timeout_s=0.3, timeout_grace_s=0
        )
        started = time.monotonic()
        with pytest.raises(LLMTimeout):
            await debate(llm, sink)
        assert time.monotonic() - started < 0.9  # nothing waited for
    assert sink.tokens == 2 * worst(server) and sink.calls == 2


async def test_both_served_attempts_of_a_call_that_failed_over_are_charged_exactly_once() -> None:
    """Timed out on a slow replica, answered by the other: the answer settles the call, the first
    replica's late reply is charged on its own (as no further call). The deadline leaves the
    instant replica a wide margin: on a loaded machine a 0.4 s deadline was missed by it too, and
    with no replica left to fail over to, the call timed out."""
    with ScriptedLLM(latency_s=3.0) as slow, ScriptedLLM(latency_s=0.0) as fast:
        script(slow)
        script(fast)
        sink = Sink()
        llm = OpenAIChatClient(
            [slow.base_url, fast.base_url],
            "scripted",
            structured_mode="off",
            timeout_s=1.5,
            retry=RetryPolicy(max_attempts=4, backoff_base_s=0.01),
        )
        with affinity("debate-1"):
            llm.replicas._bind("debate-1", llm.replicas.urls[0])
            result = await debate(llm, sink)
    assert len(slow.requests) == 2 and len(fast.requests) >= 2
    assert slow.tokens_served > 0
    assert sink.tokens == slow.tokens_served + fast.tokens_served
    # Calls are the debate's: one per transcript record, the extra attempts counted in tokens only.
    assert sink.calls == len(result.transcript)
    # The transcript keeps what the answering replica reported.
    assert sum(r.prompt_tokens + r.completion_tokens for r in result.transcript) == fast.tokens_served


async def test_a_debate_cancelled_while_replies_are_due_is_still_settled_exactly() -> None:
    """Cancelled while a call that timed out on one replica is being retried on another: the call
    is settled when it ends, the earlier attempt's late reply too."""
    with ScriptedLLM(latency_s=1.0) as slow, ScriptedLLM(latency_s=0.5) as second:
        script(slow)
        script(second)
        sink = Sink()
        llm = OpenAIChatClient(
            [slow.base_url, second.base_url],
            "scripted",
            structured_mode="off",
            timeout_s=0.3,
            retry=RetryPolicy(max_attempts=4, backoff_base_s=0.01),
        )
        with affinity("debate-2"):
            llm.replicas._bind("debate-2", llm.replicas.urls[0])
            task = asyncio.ensure_future(debate(llm, sink))
            for _ in range(500):  # both samples timed out on the slow one and went to the other
                if len(second.requests) == 2:
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert len(slow.requests) == 2 and len(second.requests) == 2
    assert sink.tokens == slow.tokens_served + second.tokens_served
    assert sink.calls == 2


async def test_a_cancellation_during_the_grace_still_settles_what_was_served() -> None:
    """Both calls timed out and the debate waits for their late replies when it is cancelled (a
    second time, as a worker's watcher may): the wait goes on, bounded, and settles them exactly."""
    with ScriptedLLM(latency_s=1.0) as server:
        script(server)
        sink = Sink()
        llm = OpenAIChatClient(server.base_url, "scripted", structured_mode="off", timeout_s=0.3)
        task = asyncio.ensure_future(debate(llm, sink))
        await asyncio.sleep(0.5)  # both timed out; their replies are due in the grace
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(server.requests) == 2
    assert sink.tokens == server.tokens_served < 2 * worst(server) and sink.calls == 2


async def test_a_settlement_wait_shorter_than_the_grace_keeps_the_worst_case_never_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The settlement wait ends before the late replies come: their requests are cut, the worst case
    stays, and a reply that comes anyway is not charged on top."""
    import engine.runner

    monkeypatch.setattr(engine.runner, "LATE_SETTLEMENT_S", 0.3)
    with ScriptedLLM(latency_s=1.5) as server:
        script(server)
        sink = Sink()
        llm = OpenAIChatClient(server.base_url, "scripted", structured_mode="off", timeout_s=0.3)
        task = asyncio.ensure_future(debate(llm, sink))
        await asyncio.sleep(0.45)  # both timed out; their replies are due in the grace
        task.cancel()
        with pytest.raises((asyncio.CancelledError, LLMTimeout)):
            await task
        await asyncio.sleep(1.3)  # the server answers the cut requests meanwhile
        assert sink.tokens == 2 * worst(server) and sink.calls == 2


def test_an_extra_attempt_is_held_without_a_check_and_counts_no_call() -> None:
    budget = CallBudget(2, 100)
    call = budget.reserve(40, 20)
    extra = budget.hold_attempt(call)  # past the token limit: already on its way
    assert (budget.tokens_reserved, budget.calls_reserved) == (120, 1)
    assert budget.settle(extra, 30) == 30
    assert budget.settle(call, 25) == 25
    assert (budget.tokens_used, budget.calls_used, budget.tokens_reserved) == (55, 1, 0)

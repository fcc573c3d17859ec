"""Budgets are hard limits: every call reserves its worst case before it is sent, also when a round's
calls are sent at once (twenty self-consistency samples, eight MADKE agents), and the tokens the
scripted server actually served never exceed ``budget_tokens`` nor the calls ``budget_calls``.

The scripted server counts tokens itself (words of each message and reply), so "served" is what the
server says it did, summed over the requests it received, not what the engine believes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.budget import BudgetExhausted, CallBudget, prompt_token_bound
from engine.config import DebateConfig
from engine.context import SingleModel, Spend
from engine.runner import run_debate
from services.chat_model import ChatMessage, LLMError
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient, RetryPolicy
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit

POOL = KnowledgePool(
    pool_id="p",
    question="Who painted the Mona Lisa?",
    items=[KnowledgeItem(n=1, source="wikipedia", title="Mona Lisa", text="Painted by Leonardo da Vinci.")],
)
REPLY = "The answer is [Leonardo da Vinci]."


def served_tokens(llm: ScriptedLLM) -> int:
    """What the scripted server charged for the requests it received (its own word count)."""
    total = 0
    for body in llm.requests:
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        total += prompt + len(_answer_for(body).split())
    return total


def _answer_for(body: dict[str, Any]) -> str:
    text = request_text(body)
    if "respond with [Yes]" in text:
        return "The agents agree. [Yes]"
    if "select knowledge from the knowledge pool" in text:
        return "[1]"
    if "summarize the final answer" in text:
        return "The final answer is [Leonardo da Vinci]."
    return REPLY


def script(llm: ScriptedLLM) -> None:
    for phrase in (
        "respond with [Yes]",
        "select knowledge from the knowledge pool",
        "summarize the final answer",
    ):
        llm.on(phrase, lambda body: _answer_for(body))
    llm.on("", REPLY)


async def run(llm: ScriptedLLM, on_usage: Any = None, **config: Any) -> Any:
    client = OpenAIChatClient(llm.base_url, "scripted", structured_mode="off", max_concurrency=32)
    try:
        extra = {"judge": "llm"} if config.get("protocol", "madke") == "madke" else {}
        cfg = DebateConfig(prompt_style="paper", **extra, **config)
        return await run_debate(POOL.question, POOL, cfg, SingleModel(client), on_usage=on_usage)
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("config", "budget"),
    [
        ({"protocol": "self_consistency", "samples": 20}, 300),  # the attack: 8.7x before
        ({"protocol": "madke", "agents": 8}, 600),  # 3.7x before
        ({"protocol": "self_consistency", "samples": 20}, 1_000),
        ({"protocol": "madke", "agents": 8}, 3_000),
    ],
)
async def test_concurrent_calls_never_overrun_the_token_budget(
    scripted: ScriptedLLM, config: dict[str, Any], budget: int
) -> None:
    script(scripted)
    result = await run(scripted, budget_tokens=budget, max_tokens=32, **config)
    assert served_tokens(scripted) <= budget
    used = result.usage.prompt_tokens + result.usage.completion_tokens
    assert used == served_tokens(scripted)
    assert len(scripted.requests) == result.usage.calls
    assert result.answer_source.startswith("budget exhausted (token budget of")


async def test_calls_that_do_not_fit_wait_for_their_siblings_in_flight(scripted: ScriptedLLM) -> None:
    """Twenty samples sent at once, room for three worst cases: never more than three in flight, and
    the others are sent as those settle (using far less than reserved), until the budget is spent."""
    script(scripted)
    scripted.latency_s = 0.05
    probe = await run(scripted, protocol="self_consistency", samples=1, max_tokens=32)
    one = prompt_token_bound(probe.transcript[0].messages) + 32
    scripted.reset()
    script(scripted)
    budget = 3 * one + one // 2
    result = await run(scripted, protocol="self_consistency", samples=20, max_tokens=32, budget_tokens=budget)
    assert scripted.max_in_flight == 3
    assert 3 < len(scripted.requests) == result.usage.calls
    assert served_tokens(scripted) <= budget
    assert result.answer == "Leonardo da Vinci"


async def test_call_budget_holds_for_concurrent_calls(scripted: ScriptedLLM) -> None:
    script(scripted)
    result = await run(scripted, protocol="self_consistency", samples=20, budget_calls=3)
    assert len(scripted.requests) == 3 == result.usage.calls
    assert "call budget of 3 reached" in result.answer_source


async def test_every_call_is_reported_to_the_usage_sink_as_it_ends(scripted: ScriptedLLM) -> None:
    script(scripted)
    spends: list[Spend] = []

    async def on_usage(spend: Spend) -> None:
        spends.append(spend)

    result = await run(scripted, on_usage, protocol="madke", agents=3)
    # Each call: its worst case before it is sent, then the difference to what it used.
    assert len(spends) == 2 * len(scripted.requests) == 2 * result.usage.calls
    assert sum(s.calls for s in spends) == result.usage.calls
    assert sum(s.tokens for s in spends) == served_tokens(scripted)
    holds = [s for s in spends if s.calls == 1]
    assert len(holds) == result.usage.calls and all(s.tokens > 0 for s in holds)
    # What the server reported never exceeds the worst case held for it: settlements only give back.
    assert all(s.tokens <= 0 for s in spends if s.calls == 0)


@pytest.mark.slow
async def test_a_call_cancelled_in_flight_is_charged_what_the_server_served(scripted: ScriptedLLM) -> None:
    """A cancelled debate's calls in flight are held at their worst case until the server answers,
    then charged what it really served: the debate ends once they are settled."""
    script(scripted)
    scripted.latency_s = 2.0
    spends: list[Spend] = []

    async def on_usage(spend: Spend) -> None:
        spends.append(spend)

    task = asyncio.ensure_future(
        run(scripted, on_usage, protocol="self_consistency", samples=4, max_tokens=32)
    )
    for _ in range(500):  # all four samples sent (and held by the server's latency)
        if len(scripted.requests) == 4:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    messages: list[ChatMessage] = scripted.requests[0]["messages"]
    worst = prompt_token_bound(messages) + 32
    holds = [s for s in spends if s.calls == 1]
    assert len(holds) == 4 and sum(s.tokens for s in holds) == 4 * worst  # held before sending
    assert sum(s.tokens for s in spends) == served_tokens(scripted) < 4 * worst  # settled to the served
    assert sum(s.calls for s in spends) == 4


@pytest.mark.slow
async def test_a_cancelled_call_the_server_never_answers_in_time_stays_at_its_worst_case(
    scripted: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Safe for the operator: a call still running when the settlement wait ends keeps its worst case."""
    import engine.runner

    monkeypatch.setattr(engine.runner, "LATE_SETTLEMENT_S", 0.5)
    script(scripted)
    scripted.latency_s = 5.0
    spends: list[Spend] = []

    async def on_usage(spend: Spend) -> None:
        spends.append(spend)

    task = asyncio.ensure_future(
        run(scripted, on_usage, protocol="self_consistency", samples=2, max_tokens=32)
    )
    for _ in range(500):
        if len(scripted.requests) == 2:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    worst = prompt_token_bound(scripted.requests[0]["messages"]) + 32
    assert sum(s.tokens for s in spends) == 2 * worst and sum(s.calls for s in spends) == 2


def test_reservations_are_atomic_and_settled_with_real_use() -> None:
    budget = CallBudget(None, 100)
    first = budget.reserve(40, 20)
    with pytest.raises(BudgetExhausted, match="held by calls in flight"):
        budget.reserve(40, 20)  # 60 held + 60 > 100: not sent
    assert budget.settle(first, 25) == 25
    second = budget.reserve(40, 20)  # 25 used + 60 fits
    budget.cancel(second)
    assert (budget.tokens_used, budget.tokens_reserved, budget.calls_used) == (25, 0, 1)
    third = budget.reserve(40, 20)
    assert budget.forfeit(third) == 60 and budget.tokens_used == 85


@pytest.mark.slow
async def test_an_llm_outage_at_any_point_of_a_debate_charges_exactly_what_was_served() -> None:
    """503s from some instant on (the worker's retry policy: two attempts): the failing call is given
    back, its siblings are cut by the failure and settled by how they end, whatever the timing (a
    sibling whose own refusal lands in the same instant as the cancellation was once kept at its
    worst case)."""
    for trial in range(16):
        with ScriptedLLM(latency_s=0.2) as llm:
            script(llm)
            spends: list[Spend] = []

            async def on_usage(spend: Spend, spends: list[Spend] = spends) -> None:
                spends.append(spend)

            async def outage(after_s: float, server: ScriptedLLM = llm) -> None:
                await asyncio.sleep(after_s)
                server.fail_for(5, status=503)

            start = asyncio.ensure_future(outage(0.025 * trial))
            client = OpenAIChatClient(
                llm.base_url, "scripted", structured_mode="off", retry=RetryPolicy(2, 0.05, 1.0)
            )
            cfg = DebateConfig(prompt_style="paper", judge="llm", rounds=2)
            try:
                await run_debate(POOL.question, POOL, cfg, SingleModel(client), on_usage=on_usage)
            except LLMError:
                pass
            finally:
                await client.aclose()
                await start
            assert sum(s.tokens for s in spends) == llm.tokens_served, (trial, spends)

"""No setting is silently ignored, and budgets stop a debate that reaches them.

Every ``DebateConfig`` field either takes effect in the chosen protocol or is refused; budgets are
enforced in the engine, which then answers from what it has and says so in ``answer_source``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from engine.budget import prompt_token_bound as bound
from engine.config import HONOURED, AgentSpec, DebateConfig, ignored_settings
from engine.context import SingleModel
from engine.runner import run_debate
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit

# A non-default value for every field, valid on its own.
NON_DEFAULT: dict[str, Any] = {
    "agents": 3,
    "rounds": 2,
    "temperature": 0.9,
    "knowledge": "wikipedia",
    "selection": False,
    "max_selected": 2,
    "sequential": True,
    "k_wiki": 3,
    "k_web": 2,
    "search_query": "passage",
    "samples": 3,
    "prompt_style": "robust",
    "judge": "rule",
    "max_tokens": 64,
    "seed": 7,
    "ordering": "madc",
    "confidence": True,
    "speaking_order": "reverse",
    "depth": 2,
    "reasks": 2,
    "mad": {"tit_for_tat": 1},
    "mallm": {"decision": "unanimity"},
    "budget_calls": 10,
    "budget_tokens": 1000,
    "debate_search": {"per_agent": 1},
}


def test_the_table_covers_every_field() -> None:
    fields = set(DebateConfig.model_fields) - {"protocol", "team"}
    assert fields == set(NON_DEFAULT)
    for protocol in HONOURED:
        assert HONOURED[protocol] <= set(DebateConfig.model_fields)


@pytest.mark.parametrize("protocol", sorted(HONOURED))
@pytest.mark.parametrize("field", sorted(NON_DEFAULT))
def test_a_setting_is_honoured_or_refused(protocol: str, field: str) -> None:
    if protocol == "mad" and field == "agents":
        pytest.skip("mad has exactly two debaters (its own validation)")
    values: dict[str, Any] = {"protocol": protocol, field: NON_DEFAULT[field]}
    try:
        config = DebateConfig.model_validate(values)
    except ValidationError as exc:
        assert field not in HONOURED[protocol]
        assert f"{field}: protocol {protocol!r} does not use" in str(exc)
        return
    assert field in HONOURED[protocol]
    # What the API stores and the worker re-validates passes again.
    assert DebateConfig.model_validate(config.model_dump(mode="json")) == config


def test_refusal_names_the_field_and_who_uses_it() -> None:
    with pytest.raises(
        ValidationError, match=r"judge: protocol 'society' does not use judge \(used by madke\)"
    ):
        DebateConfig(protocol="society", judge="rule")
    with pytest.raises(ValidationError, match="team: protocol 'single'"):
        DebateConfig(protocol="single", agents=1, team=[AgentSpec(temperature=0.2)])
    # Defaults are never "set": a single-agent protocol with the default agents count is fine.
    assert ignored_settings(DebateConfig(protocol="single")) == []
    assert ignored_settings(DebateConfig(protocol="rag", agents=1)) == []


POOL = KnowledgePool(
    pool_id="p",
    question="Who painted the Mona Lisa?",
    items=[KnowledgeItem(n=1, source="wikipedia", title="Mona Lisa", text="By Leonardo da Vinci.")],
)


def disagreeing(llm: ScriptedLLM) -> None:
    llm.on("select knowledge from the knowledge pool", "[1]")
    llm.on("respond with [Yes]", "[No]")
    llm.on("summarize the final answer", "[Leonardo da Vinci]")
    llm.on("Question:", ["The answer is [Leonardo da Vinci].", "The answer is [Raphael]."])


async def run(llm: ScriptedLLM, **config: Any) -> Any:
    client = OpenAIChatClient(llm.base_url, "scripted", structured_mode="off")
    try:
        cfg = DebateConfig(prompt_style="paper", judge="llm", sequential=True, **config)
        return await run_debate(POOL.question, POOL, cfg, SingleModel(client))
    finally:
        await client.aclose()


async def test_call_budget_stops_the_debate_and_answers_from_what_it_has(scripted: ScriptedLLM) -> None:
    disagreeing(scripted)
    result = await run(scripted, budget_calls=4)  # select+debater for both agents, then no judge
    assert len(scripted.requests) == 4 and result.usage.calls == 4
    assert "budget exhausted (call budget of 4 reached)" in result.answer_source
    assert result.answer == "Leonardo da Vinci" and result.consensus is False
    assert result.final_answers == ["Leonardo da Vinci", "Raphael"]


async def test_token_budget_reserves_each_call_before_it_is_sent(scripted: ScriptedLLM) -> None:
    disagreeing(scripted)
    unbounded = await run(scripted, max_tokens=64)
    scripted.reset()
    disagreeing(scripted)
    # Room for exactly the worst case of the first two calls (prompt bound + max_tokens each).
    first_two = sum(bound(r.messages or []) + 64 for r in unbounded.transcript[:2])
    result = await run(scripted, budget_tokens=first_two, max_tokens=64)
    # The first two fit whatever they turn out to use; later calls fit only in what they left.
    assert unbounded.usage.calls > len(scripted.requests) == result.usage.calls >= 2
    assert "token budget of" in result.answer_source
    used = result.usage.prompt_tokens + result.usage.completion_tokens
    assert used <= first_two  # the call that would not fit was never sent


async def test_budget_before_any_answer_says_so(scripted: ScriptedLLM) -> None:
    disagreeing(scripted)
    result = await run(scripted, budget_calls=1)
    assert result.answer is None
    assert "before any agent gave a usable answer" in result.answer_source

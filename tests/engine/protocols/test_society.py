"""``society`` (Du et al.) end to end: rounds, majority vote, view ordering, confidence, teams."""

from __future__ import annotations

import pytest

from engine.config import AgentSpec, DebateConfig, GoldRequired
from engine.protocols.common import order_views, path_consistency
from engine.runner import run_debate
from services.knowledge import KnowledgePool, empty_pool
from services.llm.factory import RoleModelsFromSettings
from services.llm.settings import LLMSettings
from tests.engine.protocols.helpers import QUESTION, debate, texts
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit

FIRST = "Can you answer the following question"
UPDATE = "These are the solutions to the problem from other agents"


async def test_fixed_rounds_majority_and_knowledge_selection(
    scripted: ScriptedLLM, pool: KnowledgePool
) -> None:
    scripted.on("select knowledge from the knowledge pool", "Helpful: [2]")
    scripted.on(UPDATE, "Considering the others, the answer is [Paris].")
    scripted.on(FIRST, ["I think [Paris].", "It is [Lyon].", "Surely [Paris]."])
    result, events = await debate(scripted, pool, protocol="society", agents=3, rounds=2, sequential=True)
    assert result.rounds == 2 and result.answer == "Paris"
    assert result.answer_source.startswith("majority vote of 3 agents (3 votes)")
    roles = [(r.round, r.role) for r in result.transcript]
    assert roles.count((1, "select")) == 3 and roles.count((2, "debater")) == 3
    debaters = [r for r in result.transcript if r.role == "debater"]
    assert all(r.knowledge == [2] for r in debaters)
    assert "Neil Armstrong" in texts(scripted, FIRST)[0]  # the selected item is in the prompt
    assert [e for e, _ in events].count("round.completed") == 2
    assert result.usage.calls == 12


async def test_no_early_stop_and_unparseable_answer_is_kept(scripted: ScriptedLLM) -> None:
    scripted.on(UPDATE, ["[Paris]", "no idea at all", "[Paris]"])
    scripted.on(FIRST, "[Paris]")
    result, _ = await debate(scripted, protocol="society", agents=3, rounds=2, sequential=True)
    assert result.rounds == 2  # Du et al. never stop early
    assert result.answer == "Paris" and result.consensus is False
    assert len(result.final_answers) == 3 and result.final_answers[1] != "Paris"


def round2_views(server: ScriptedLLM, agent_request: int) -> list[str]:
    text = request_text(server.requests[agent_request])
    block = text.split(UPDATE, 1)[1]
    return [part.split("```", 1)[0].strip() for part in block.split("```")[1::2]]


async def test_madc_shows_the_most_consistent_view_last(scripted: ScriptedLLM) -> None:
    scripted.on(UPDATE, "[Paris]")
    scripted.on(FIRST, ["[Paris]", "[Lyon]", "[Paris]", "[Nice]"])
    await debate(scripted, protocol="society", agents=4, rounds=2, sequential=True, ordering="madc")
    # agent 3 sees agents 0 (Paris, consistency 1), 1 (Lyon, 0), 2 (Paris, 1): Lyon first
    assert round2_views(scripted, 7) == ["[Lyon]", "[Paris]", "[Paris]"]
    scripted.reset()
    scripted.on(UPDATE, "[Paris]")
    scripted.on(FIRST, ["[Paris]", "[Lyon]", "[Paris]", "[Nice]"])
    await debate(scripted, protocol="society", agents=4, rounds=2, sequential=True, ordering="fixed")
    assert round2_views(scripted, 7) == ["[Paris]", "[Lyon]", "[Paris]"]


async def test_truth_last_needs_gold_and_orders_by_it(scripted: ScriptedLLM) -> None:
    scripted.on(UPDATE, "[Lyon]")
    scripted.on(FIRST, ["[Paris]", "[Lyon]", "[Paris]", "[Nice]"])
    await debate(
        scripted,
        protocol="society",
        agents=4,
        rounds=2,
        sequential=True,
        ordering="truth_last",
        gold=["Lyon"],
    )
    # agent 0 sees 1 (Lyon = gold), 2 (Paris), 3 (Nice): the right answer last
    assert round2_views(scripted, 4) == ["[Paris]", "[Nice]", "[Lyon]"]
    with pytest.raises(GoldRequired, match="ordering"):
        await debate(scripted, protocol="society", agents=4, ordering="truth_last")


def test_order_views_unparseable_answers_get_their_own_key() -> None:
    answers = [None, None, "Paris", "paris", "Lyon"]
    assert path_consistency(answers) == [0, 0, 1, 1, 0]
    assert order_views([0, 1, 2, 3, 4], answers, "madc") == [0, 1, 4, 2, 3]
    assert order_views([1, 2, 3], answers, "random", seed=3) == order_views(
        [1, 2, 3], answers, "random", seed=3
    )
    assert sorted(order_views([1, 2, 3], answers, "random", seed=3)) == [1, 2, 3]


async def test_confidence_is_stated_and_shown(scripted: ScriptedLLM) -> None:
    scripted.on(UPDATE, "Still [Paris].\nConfidence: 9")
    scripted.on(FIRST, ["[Paris]\nConfidence: 8", "[Lyon]\nConfidence: 3"])
    result, _ = await debate(
        scripted, protocol="society", agents=2, rounds=2, sequential=True, confidence=True
    )
    assert "Confidence: N" in texts(scripted, FIRST)[0]
    assert "(confidence 3/10)" in request_text(scripted.requests[2])  # agent 0 sees agent 1's confidence
    assert [r.extra.get("confidence") for r in result.transcript if r.round == 1] == [8, 3]


async def test_robust_confidence_is_part_of_the_schema_checked_answer(scripted: ScriptedLLM) -> None:
    """Robust style with confidence: one JSON object with reason, answer and confidence, sent with its
    schema; the confidence is read from it and shown to the other agent."""
    scripted.on(
        "Other agents' answers",
        "free text",
        json_reply='{"reason": "r", "answer": "Paris", "confidence": 9}',
    )
    scripted.on(
        "Question:",
        "free text",
        json_reply=[
            '{"reason": "r", "answer": "Paris", "confidence": 8}',
            '{"reason": "r", "answer": "Lyon", "confidence": 3}',
        ],
    )
    result, _ = await debate(
        scripted,
        protocol="society",
        agents=2,
        rounds=2,
        sequential=True,
        confidence=True,
        prompt_style="robust",
        knowledge="none",
    )
    turns = [b for b in scripted.requests if "response_format" in b]
    assert len(turns) == 4
    assert all(b["response_format"]["json_schema"]["schema"]["required"][-1] == "confidence" for b in turns)
    assert [r.extra.get("confidence") for r in result.transcript] == [8, 3, 9, 9]
    assert "(confidence 3/10)" in request_text(scripted.requests[2])
    assert result.answer == "Paris"


async def test_robust_style_prompts(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    scripted.on('{"selected"', '{"selected": [1]}')
    scripted.on("Other agents' answers", "Agreed.\nFinal answer: [Paris]")
    scripted.on("Question:", ["Final answer: [Paris]", "Final answer: [Lyon]"])
    result, _ = await debate(
        scripted, pool, protocol="society", agents=2, rounds=2, sequential=True, prompt_style="robust"
    )
    assert result.answer == "Paris"
    later = texts(scripted, "Other agents' answers")
    assert later and "(K1)" in later[0] and "[Lyon]" in later[0]


async def test_heterogeneous_team_routes_each_agent() -> None:
    with ScriptedLLM(model="base") as base, ScriptedLLM(model="other") as other:
        base.on(FIRST, "[Paris]")
        base.on(UPDATE, "[Paris]")
        other.on(FIRST, "[Paris]")
        other.on(UPDATE, "[Paris]")
        models = RoleModelsFromSettings(LLMSettings(base_url=base.base_url, model="base-model"))
        config = DebateConfig(
            protocol="society",
            agents=2,
            rounds=2,
            team=[AgentSpec(base_url=other.base_url, model="small-model", temperature=0.1), AgentSpec()],
        )
        try:
            result = await run_debate(QUESTION, empty_pool(QUESTION), config, models)
        finally:
            await models.aclose()
    assert len(other.requests) == 2 and len(base.requests) == 2
    assert {b["model"] for b in other.requests} == {"small-model"}
    assert {b["temperature"] for b in other.requests} == {0.1}
    assert {b["temperature"] for b in base.requests} == {0.5}
    assert {r.model for r in result.transcript if r.agent == 0} == {"small-model"}


def test_team_size_must_match_agents() -> None:
    with pytest.raises(ValueError, match="team"):
        DebateConfig(protocol="society", agents=3, team=[AgentSpec(), AgentSpec()])

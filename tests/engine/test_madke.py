"""MADKE end to end against the scripted OpenAI-compatible server: prompts, flow, parsing, accounting."""

from __future__ import annotations

from typing import Any

import pytest

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.result import Checkpoint, DebateResult
from engine.runner import run_debate
from services.knowledge import KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.unit

QUESTION = "On what date in 1969 did Neil Armstrong first set foot on the moon?"
SELECT = "select knowledge from the knowledge pool"
JUDGE = "respond with [Yes]"
SUMMARY = "summarize the final answer"
ORDERLY = "There are a few other agents"


def script_madke(server: ScriptedLLM, verdicts: list[str], select: str = "helpful: [1], [3]") -> None:
    server.on(SELECT, select)
    server.on(JUDGE, verdicts)
    server.on(SUMMARY, "Both agents agree. The final answer is [July 20, 1969].")
    server.on(ORDERLY, "Given the other agent, the answer is [July 20, 1969].")
    server.on("Question:", "Based on the knowledge, the answer is [July 20, 1969].")


async def debate(
    server: ScriptedLLM, pool: KnowledgePool, **cfg: Any
) -> tuple[DebateResult, list[tuple[str, dict[str, Any]]]]:
    async with OpenAIChatClient(server.base_url, "scripted") as client:
        events: list[tuple[str, dict[str, Any]]] = []
        result = await run_debate(
            QUESTION, pool, DebateConfig(**cfg), SingleModel(client), lambda e, d: events.append((e, d))
        )
    return result, events


def bodies_with(server: ScriptedLLM, marker: str) -> list[str]:
    return [request_text(b) for b in server.requests if marker in request_text(b)]


async def test_judge_yes_ends_after_round_one(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    script_madke(scripted, ["The answers agree. [Yes]"])
    result, events = await debate(scripted, pool)
    assert result.rounds == 1 and result.consensus is True
    assert result.answer == "July 20, 1969" and result.answer_source == "summarizer"
    roles = [(r.round, r.role, r.agent) for r in result.transcript]
    assert roles == [
        (1, "select", 0),
        (1, "debater", 0),
        (1, "select", 1),
        (1, "debater", 1),
        (1, "judge", None),
        (1, "summarizer", None),
    ]
    assert [e for e, _ in events].count("judge.verdict") == 1
    assert result.final_answers == ["July 20, 1969", "July 20, 1969"]


async def test_judge_no_runs_to_the_round_limit(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    script_madke(scripted, ["[No]"])
    result, events = await debate(scripted, pool, rounds=3)
    assert result.rounds == 3 and result.consensus is False
    assert sum(1 for r in result.transcript if r.role == "judge") == 3
    assert sum(1 for r in result.transcript if r.role == "summarizer") == 1
    assert [d["round"] for e, d in events if e == "round.completed"] == [1, 2, 3]
    # 2 agents x (select + debate) + judge per round, plus the summary.
    assert result.usage.calls == 3 * 5 + 1


async def test_prompts_carry_knowledge_history_and_other_answers(
    scripted: ScriptedLLM, pool: KnowledgePool
) -> None:
    script_madke(scripted, ["[No]", "[Yes]"])
    await debate(scripted, pool)
    selects = bodies_with(scripted, SELECT)
    # Prompt 3.1: the numbered pool, and from round 2 the agent's previous answer.
    assert all("[1] Apollo 11: " + "Apollo 11 was" in s and "[3] Moon landing" in s for s in selects)
    assert all("Your previous answer" not in s for s in selects[:2])
    assert all("Your previous answer: Based on the knowledge" in s for s in selects[2:])
    assert "add [No Found]" in selects[0] and "up to 3" in selects[0]
    # Prompt 3.2 in round 1: only the selected items [1] and [3], the one-shot example.
    first = [b for b in bodies_with(scripted, "Here is an example") if "Bridget Driscoll" in b]
    assert first and all("[1] Apollo 11" in b and "[3] Moon" in b and "[2] Neil" not in b for b in first)
    # Prompt 3.3 in round 2: the other agent's previous answer and the agent's own history.
    orderly = bodies_with(scripted, ORDERLY)
    assert len(orderly) == 2
    assert all("Answers from other agents:" in b and "Your historical answers:" in b for b in orderly)
    assert all("Round 1: Based on the knowledge, the answer is [July 20, 1969]." in b for b in orderly)
    # Appendix A role prompts are the system prompts.
    systems = [b["messages"][0]["content"] for b in scripted.requests]
    assert any(
        s.startswith("You are an intelligent, diplomatic, and assertive debate agent") for s in systems
    )
    assert any(s.startswith("As a judge agent") for s in systems)
    assert any(s.startswith("You are an intelligent summarizer agent") for s in systems)
    judge = bodies_with(scripted, JUDGE)[0]
    assert "Agent 1: Based on the knowledge" in judge and "Agent 2:" in judge


async def test_selection_outside_pool_is_ignored_and_recorded(
    scripted: ScriptedLLM, pool: KnowledgePool
) -> None:
    script_madke(scripted, ["[Yes]"], select="I choose [2], [99], [2] and [3, 1].")
    result, _ = await debate(scripted, pool)
    selects = [r for r in result.transcript if r.role == "select"]
    assert all(r.selected == [2, 3, 1] and r.ignored_selection == [99] for r in selects)
    debaters = [r for r in result.transcript if r.role == "debater"]
    assert all(r.knowledge == [2, 3, 1] for r in debaters)


async def test_no_found_gives_no_knowledge(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    script_madke(scripted, ["[Yes]"], select="Nothing relevant. [No Found]")
    result, _ = await debate(scripted, pool)
    assert all(r.selected == [] and r.no_found for r in result.transcript if r.role == "select")
    assert all(r.knowledge == [] for r in result.transcript if r.role == "debater")
    assert all("Knowledge:" not in b for b in bodies_with(scripted, "Here is an example"))


async def test_garbage_output_is_recorded_and_the_debate_completes(
    scripted: ScriptedLLM, pool: KnowledgePool
) -> None:
    scripted.on(SELECT, "")
    scripted.on(JUDGE, "hmm")
    scripted.on(SUMMARY, "")
    scripted.on("Question:", "I think it was in July")
    result, _ = await debate(scripted, pool, rounds=2)
    assert result.rounds == 2 and result.consensus is False
    sel = [r for r in result.transcript if r.role == "select"]
    assert all(r.parse_error == "empty reply" and r.selected == [] for r in sel)
    deb = [r for r in result.transcript if r.role == "debater"]
    assert all(
        r.answer == "I think it was in July" and "no bracketed answer" in (r.parse_error or "") for r in deb
    )
    assert all(r.parse_error == "no verdict found" for r in result.transcript if r.role == "judge")
    assert result.answer == "I think it was in July"
    assert result.answer_source.startswith("majority")


async def test_no_selection_and_no_knowledge_modes(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    script_madke(scripted, ["[Yes]"])
    result, _ = await debate(scripted, pool, selection=False)
    assert not any(r.role == "select" for r in result.transcript)
    assert all(r.knowledge == [1, 2, 3] for r in result.transcript if r.role == "debater")
    scripted.requests.clear()
    result, _ = await debate(scripted, pool, knowledge="none")
    assert result.pool.items == [] and not any(r.role == "select" for r in result.transcript)
    result, _ = await debate(scripted, pool, knowledge="web")
    assert [i.title for i in result.pool.items] == ["Moon landing - History"] and result.pool.items[0].n == 1


async def test_usage_totals_match_the_transcript(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    script_madke(scripted, ["[No]", "[Yes]"])
    result, _ = await debate(scripted, pool)
    assert result.usage.calls == len(result.transcript) == len(scripted.requests)
    assert result.usage.prompt_tokens == sum(r.prompt_tokens for r in result.transcript) > 0
    assert result.usage.completion_tokens == sum(r.completion_tokens for r in result.transcript) > 0
    assert sum(u.calls for u in result.usage_by_role.values()) == result.usage.calls
    assert set(result.usage_by_role) == {"select", "debater", "judge", "summarizer"}


async def test_round_calls_run_concurrently_unless_sequential(pool: KnowledgePool) -> None:
    with ScriptedLLM(latency_s=0.1) as server:
        script_madke(server, ["[Yes]"])
        await debate(server, pool)
        assert server.max_in_flight == 2
        server.max_in_flight = 0
        await debate(server, pool, sequential=True)
        assert server.max_in_flight == 1


async def test_resume_from_checkpoint_skips_completed_rounds(
    scripted: ScriptedLLM, pool: KnowledgePool
) -> None:
    script_madke(scripted, ["[No]", "[No]", "[Yes]"])
    checkpoints: list[Checkpoint] = []
    async with OpenAIChatClient(scripted.base_url, "scripted") as client:
        full = await run_debate(
            QUESTION,
            pool,
            DebateConfig(),
            SingleModel(client),
            on_checkpoint=lambda c: _append(checkpoints, c),
        )
        assert [c.round for c in checkpoints] == [1, 2, 3]
        scripted.reset()
        script_madke(scripted, ["[Yes]"])
        resumed = await run_debate(QUESTION, pool, DebateConfig(), SingleModel(client), resume=checkpoints[0])
    # Only rounds 2.. and the summary were asked again; the transcript still has round 1.
    assert len(scripted.requests) == 5 + 1
    assert resumed.rounds == 2 and resumed.consensus
    assert [r.round for r in resumed.transcript].count(1) == 5
    assert full.rounds == 3


async def _append(store: list[Checkpoint], c: Checkpoint) -> None:
    store.append(Checkpoint.model_validate(c.model_dump()))


@pytest.mark.parametrize("protocol", ["single", "cot", "rag"])
async def test_single_agent_baselines(scripted: ScriptedLLM, pool: KnowledgePool, protocol: str) -> None:
    scripted.on("Question:", "So the answer is [July 20, 1969].")
    result, _ = await debate(scripted, pool, protocol=protocol)
    assert result.answer == "July 20, 1969" and result.usage.calls == 1
    body = request_text(scripted.requests[0])
    assert ("[1] Apollo 11" in body) is (protocol == "rag")
    assert ("step by step" in body) is (protocol in ("cot", "rag"))


async def test_self_consistency_majority(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    scripted.on(
        "Question:", ["[July 20, 1969]", "[July 21, 1969]", "[july 20 1969]", "[1968]", "[July 20, 1969]"]
    )
    # Sequential: the scripted replies are handed out in arrival order, which concurrency would shuffle.
    result, _ = await debate(
        scripted, pool, protocol="self_consistency", samples=5, temperature=0.7, sequential=True
    )
    assert result.answer == "July 20, 1969" and result.usage.calls == 5
    assert "3 votes" in result.answer_source
    assert all(b["temperature"] == 0.7 for b in scripted.requests)


async def test_config_rejects_bad_input() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="agents"):
        DebateConfig(agents=0)
    with pytest.raises(ValidationError, match="rounds"):
        DebateConfig(rounds=0)
    with pytest.raises(ValidationError, match="protocol"):
        DebateConfig(protocol="nonsense")
    with pytest.raises(ValidationError, match="at least 2 agents"):
        DebateConfig(protocol="madke", agents=1)


async def test_question_limits(scripted: ScriptedLLM, pool: KnowledgePool) -> None:
    async with OpenAIChatClient(scripted.base_url, "scripted") as client:
        with pytest.raises(ValueError, match="empty"):
            await run_debate("   ", pool, DebateConfig(), SingleModel(client))
        with pytest.raises(ValueError, match="limit is 2000"):
            await run_debate("x" * 2001, pool, DebateConfig(), SingleModel(client))
    assert scripted.requests == []


async def test_every_call_asks_a_slotted_server_to_cache_its_prompt(
    scripted: ScriptedLLM, pool: KnowledgePool
) -> None:
    """On a server with KV-cache slots every call of the debate (selections, agents, judge, summary)
    asks for its prompt to be cached, and none names a slot: the server picks the one holding the
    longest shared prefix (a named busy slot would be handed another prompt's state)."""
    script_madke(scripted, ["[No]", "[Yes]"])
    async with OpenAIChatClient(scripted.base_url, "scripted", slots=4) as client:
        await run_debate(QUESTION, pool, DebateConfig(rounds=2), SingleModel(client))
    families = {
        "select" if SELECT in text else "panel" if (JUDGE in text or SUMMARY in text) else "agent"
        for text in map(request_text, scripted.requests)
    }
    assert families == {"select", "agent", "panel"}
    assert all(body.get("cache_prompt") is True and "id_slot" not in body for body in scripted.requests)

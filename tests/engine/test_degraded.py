"""A judge that fails loudly: its fallback endpoint answers and the step is marked degraded; an
unreadable verdict or summary is marked too; a fallback that names no configured endpoint is refused
when the settings load."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.config import DebateConfig
from engine.runner import run_debate
from services.knowledge import KnowledgeItem, KnowledgePool
from services.llm import LLMSettings, build_role_models
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = pytest.mark.unit

QUESTION = "Who wrote Hamlet?"
SELECT = "select knowledge from the knowledge pool"
JUDGE = "respond with [Yes]"
SUMMARY = "summarize the final answer"


def pool() -> KnowledgePool:
    items = [KnowledgeItem(n=1, source="wikipedia", title="Hamlet", text="Hamlet is a play by Shakespeare.")]
    return KnowledgePool(pool_id="p", question=QUESTION, items=items)


def settings(debaters: str, judge_url: str, backup: str) -> LLMSettings:
    return LLMSettings(
        base_url=debaters,
        model="debater-model",
        max_attempts=1,
        retry_window_s=1.0,
        judge={"base_url": judge_url, "model": "judge-model", "fallback": "backup"},
        endpoints={"backup": {"base_url": backup, "model": "backup-judge"}},
    )


def script_debaters(llm: ScriptedLLM) -> None:
    llm.on(SELECT, "helpful: [1]")
    llm.on(SUMMARY, "The final answer is [Shakespeare].")
    llm.on("Question:", "The answer is [William Shakespeare].")


async def test_a_failing_judge_is_answered_by_its_fallback_and_the_step_says_so() -> None:
    closed = ClosedPort()
    with ScriptedLLM() as debaters, ScriptedLLM() as backup:
        script_debaters(debaters)
        backup.on(JUDGE, "The answers agree. [Yes]")
        models = build_role_models(settings(debaters.base_url, f"{closed.url}/v1", backup.base_url))
        try:
            result = await run_debate(QUESTION, pool(), DebateConfig(judge="llm"), models)
        finally:
            await models.aclose()
    (judge,) = [r for r in result.transcript if r.role == "judge"]
    assert judge.verdict is True and judge.model == "backup-judge"
    assert judge.degraded is not None and "judge endpoint failed" in judge.degraded
    assert "backup-judge" in judge.degraded
    assert result.degraded == [f"round 1 judge: {judge.degraded}"]
    assert result.consensus and result.answer
    # The debaters' calls went to their own endpoint, not the fallback.
    assert all(r.model == "debater-model" for r in result.transcript if r.role != "judge")


async def test_without_a_fallback_a_failing_judge_fails_the_debate() -> None:
    closed = ClosedPort()
    with ScriptedLLM() as debaters:
        script_debaters(debaters)
        plain = LLMSettings(
            base_url=debaters.base_url,
            max_attempts=1,
            retry_window_s=1.0,
            judge={"base_url": f"{closed.url}/v1"},
        )
        models = build_role_models(plain)
        try:
            with pytest.raises(Exception, match=r"(?i)connect|unavailable|refused"):
                await run_debate(QUESTION, pool(), DebateConfig(judge="llm"), models)
        finally:
            await models.aclose()


async def test_unreadable_verdicts_and_summaries_are_marked_degraded(scripted: ScriptedLLM) -> None:
    scripted.on(SELECT, "helpful: [1]")
    scripted.on(JUDGE, ["I cannot tell.", "Still unsure."])
    scripted.on(SUMMARY, "")
    scripted.on("There are a few other agents", "The answer is [Marlowe].")
    scripted.on("Question:", "The answer is [Shakespeare].")
    models = build_role_models(LLMSettings(base_url=scripted.base_url, max_attempts=1))
    try:
        result = await run_debate(QUESTION, pool(), DebateConfig(judge="llm", rounds=2), models)
    finally:
        await models.aclose()
    kinds = [line.split(": ", 1)[1] for line in result.degraded]
    assert kinds.count("the judge's reply was unreadable: no consensus was assumed") == 2
    assert "the summary was unreadable: the majority of the final answers" in kinds


def test_a_fallback_must_name_a_configured_endpoint_and_only_for_judge_and_summarizer() -> None:
    with pytest.raises(ValidationError, match=r"judge\.fallback: no endpoint named 'nope'"):
        LLMSettings(base_url="http://x/v1", judge={"fallback": "nope"})
    with pytest.raises(ValidationError, match=r"debater\.fallback: only the judge and the summarizer"):
        LLMSettings(
            base_url="http://x/v1",
            debater={"fallback": "b"},
            endpoints={"b": {"base_url": "http://y/v1", "model": "m"}},
        )
    ok = LLMSettings(
        base_url="http://x/v1",
        summarizer={"fallback": "b"},
        endpoints={"b": {"base_url": "http://y/v1", "model": "m"}},
    )
    assert ok.summarizer.fallback == "b"

"""``mad`` (Liang et al.) end to end: tit for tat, adaptive break, extractive judge, bad verdicts."""

from __future__ import annotations

import pytest

from engine.config import DebateConfig
from engine.protocols.mad.verdict import parse_mad_verdict
from tests.engine.protocols.helpers import debate, texts
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit

JUDGE2 = "Please summarize your reasons and give the final answer"
JUDGE1 = "what answer candidates do we have"
MODERATOR = "You, as the moderator"
NO = '{"Whether there is a preference": "No", "Supported Side": "", "Reason": "", "debate_answer": ""}'
YES_NEG = (
    '```json\n{"Whether there is a preference": "Yes", "Supported Side": "Negative", '
    '"Reason": "Paris is the seat of government.", "debate_answer": "Paris"}\n```'
)


def script(
    server: ScriptedLLM, moderator: str | list[str], judge: str = '{"Reason": "r", "debate_answer": "Paris"}'
) -> None:
    server.on(JUDGE2, judge)
    server.on(JUDGE1, "Candidates: Lyon, Paris")
    server.on(MODERATOR, moderator)
    server.on("You are negative side", "I disagree. The answer is [Paris].")
    server.on("You are affirmative side", "The answer is [Lyon].")


async def test_adaptive_break_on_moderator_preference(scripted: ScriptedLLM) -> None:
    script(scripted, [NO, YES_NEG])
    result, events = await debate(scripted, protocol="mad", rounds=3)
    assert result.rounds == 2 and result.consensus is True
    assert (
        result.answer == "Paris" and "moderator (round 2, supported side: negative)" in result.answer_source
    )
    roles = [(r.round, r.role, r.agent) for r in result.transcript]
    assert roles == [
        (1, "affirmative", 0), (1, "negative", 1), (1, "moderator", None),
        (2, "affirmative", 0), (2, "negative", 1), (2, "moderator", None),
    ]  # fmt: skip
    # the tit-for-tat level 2 sentence is in the meta prompt; round 2 answers the opponent
    assert "It's not necessary to fully agree" in texts(scripted, "You are affirmative side")[0]
    assert "Do you agree with my perspective?" in texts(scripted, "You are affirmative side")[1]
    assert "You disagree with my answer" in texts(scripted, "You are negative side")[0]
    assert [e for e, _ in events].count("judge.verdict") == 2


async def test_round_limit_uses_the_two_step_judge(scripted: ScriptedLLM) -> None:
    script(scripted, NO)
    result, _ = await debate(scripted, protocol="mad", rounds=2, mad={"tit_for_tat": 3})
    assert result.rounds == 2 and result.answer == "Paris"
    assert result.answer_source == "extractive judge (round limit)"
    judge_calls = [r for r in result.transcript if r.role == "judge"]
    assert len(judge_calls) == 2
    step2 = texts(scripted, JUDGE2)[0]
    assert "Candidates: Lyon, Paris" in step2  # the second step sees the first step's reply
    assert (
        "Both sides must disagree with each other on every point"
        in texts(scripted, "You are negative side")[0]
    )


async def test_unreadable_verdicts_are_reasked_then_abstain(scripted: ScriptedLLM) -> None:
    script(scripted, "Both sides have a point.", judge="I cannot decide.")
    result, _ = await debate(scripted, protocol="mad", rounds=1, reasks=1)
    mods = [r for r in result.transcript if r.role == "moderator"]
    assert len(mods) == 2 and mods[-1].extra.get("abstained") is True
    assert result.answer == "Paris"
    assert "negative side's last answer" in result.answer_source and "abstained" in result.answer_source
    assert len([r for r in result.transcript if r.role == "judge"]) == 1 + 2  # candidates + final and re-ask
    assert "could not be read" in texts(scripted, JUDGE2)[-1]


async def test_swap_sides_and_robust_style_sends_schema(scripted: ScriptedLLM) -> None:
    scripted.on(
        "Is one side clearly correct?",
        "x",
        json_reply='{"preference": true, "supported_side": "negative", "debate_answer": "Paris"}',
    )
    scripted.on("You are the negative side", "Final answer: [Paris]")
    scripted.on("You are the affirmative side", "Final answer: [Lyon]")
    result, _ = await debate(scripted, protocol="mad", prompt_style="robust", mad={"swap_sides": True})
    assert result.answer == "Paris" and result.rounds == 1
    sides = {r.role: r.agent for r in result.transcript if r.agent is not None}
    assert sides == {"affirmative": 1, "negative": 0}
    mod = next(b for b in scripted.requests if "Is one side clearly correct?" in str(b["messages"]))
    assert "response_format" in mod
    assert result.final_answers == ["Paris", "Lyon"]
    # the debaters are asked for JSON and sent its schema, so a small model cannot stop mid-object
    turns = [b for b in scripted.requests if "side in a debate" in str(b["messages"][0])]
    assert len(turns) == 2
    for body in turns:
        schema = body["response_format"]["json_schema"]["schema"]
        assert schema["required"] == ["reason", "answer"]


async def test_robust_verdicts_that_copy_the_format_placeholder_are_no_answer(scripted: ScriptedLLM) -> None:
    # the 1.5B returned the format's own "the short answer" as its verdict in 12 of 71 MAD debates
    scripted.on(
        "Is one side clearly correct?",
        "x",
        json_reply='{"preference": true, "supported_side": "negative", '
        '"debate_answer": "the short answer you think is correct, or empty"}',
    )
    scripted.on("You are the negative side", "Final answer: [Paris]")
    scripted.on("You are the affirmative side", "Final answer: [Lyon]")
    result, _ = await debate(scripted, protocol="mad", prompt_style="robust")
    assert result.answer == "Paris"  # the supported side's answer, not the placeholder
    mod = next(r for r in result.transcript if r.role == "moderator")
    assert mod.answer is None


async def test_robust_judge_placeholder_is_reasked_then_a_side_answers(scripted: ScriptedLLM) -> None:
    scripted.on(
        "Is one side clearly correct?",
        "x",
        json_reply='{"preference": false, "supported_side": "none", "debate_answer": ""}',
    )
    scripted.on("Which candidate is correct?", "x", json_reply='{"debate_answer": "The short answer"}')
    scripted.on("List the answer candidates", "Lyon\nParis")
    scripted.on("You are the negative side", "Final answer: [Paris]")
    scripted.on("You are the affirmative side", "Final answer: [Lyon]")
    result, _ = await debate(scripted, protocol="mad", prompt_style="robust", rounds=1, reasks=1)
    assert result.answer == "Paris" and "negative side's last answer" in result.answer_source
    judges = [r for r in result.transcript if r.role == "judge"]
    assert len(judges) == 1 + 2 and all(r.answer is None for r in judges)


AFF_ARGUES = '{"reason": "The other side is correct. Lyon is the capital.", "answer": "Lyon"}'
NEG_ARGUES = '{"reason": "Paris has been the capital since 987.", "answer": "Paris"}'


async def test_robust_moderator_that_copies_a_reason_as_its_answer_gives_the_sides_answer(
    scripted: ScriptedLLM,
) -> None:
    # a third of the 1.5B's moderator verdicts put a debater's reason in the answer slot
    scripted.on(
        "Is one side clearly correct?",
        "x",
        json_reply='{"preference": true, "supported_side": "affirmative", "reason": "r", '
        '"debate_answer": "The other side is correct. Lyon is the capital."}',
    )
    scripted.on("You are the negative side", "x", json_reply=NEG_ARGUES)
    scripted.on("You are the affirmative side", "x", json_reply=AFF_ARGUES)
    result, _ = await debate(scripted, protocol="mad", prompt_style="robust")
    assert result.answer == "Lyon" and result.answer_source.startswith("affirmative side's answer")
    mod = next(r for r in result.transcript if r.role == "moderator")
    assert mod.answer is None and mod.extra["copied_reason"] is True
    # an answer of its own that the sides' reasons merely mention stands
    scripted.reset()
    scripted.on("You are the negative side", "x", json_reply=NEG_ARGUES)
    scripted.on("You are the affirmative side", "x", json_reply=AFF_ARGUES)
    scripted.on(
        "Is one side clearly correct?",
        "x",
        json_reply='{"preference": true, "supported_side": "negative", "debate_answer": "Paris"}',
    )
    result, _ = await debate(scripted, protocol="mad", prompt_style="robust")
    assert result.answer == "Paris" and result.answer_source.startswith("moderator (round 1")


async def test_robust_judge_that_copies_a_reason_is_reasked_then_a_side_answers(
    scripted: ScriptedLLM,
) -> None:
    scripted.on(
        "Is one side clearly correct?",
        "x",
        json_reply='{"preference": false, "supported_side": "none", "debate_answer": ""}',
    )
    scripted.on(
        "Which candidate is correct?",
        "x",
        json_reply='{"debate_answer": "Paris has been the capital since 987."}',
    )
    scripted.on("List the answer candidates", "Lyon\nParis")
    scripted.on("You are the negative side", "x", json_reply=NEG_ARGUES)
    scripted.on("You are the affirmative side", "x", json_reply=AFF_ARGUES)
    result, _ = await debate(scripted, protocol="mad", prompt_style="robust", rounds=1, reasks=1)
    assert result.answer == "Paris" and "negative side's last answer" in result.answer_source
    judges = [r for r in result.transcript if r.role == "judge"]
    assert len(judges) == 1 + 2 and all(r.answer is None for r in judges[1:])
    assert all(r.extra["copied_reason"] for r in judges[1:])


async def test_paper_style_debaters_answer_in_free_text(scripted: ScriptedLLM) -> None:
    script(scripted, YES_NEG)
    await debate(scripted, protocol="mad", rounds=1)
    turns = [b for b in scripted.requests if "side. " in str(b["messages"][0])]
    assert len(turns) == 2 and all("response_format" not in b for b in turns)


def test_verdict_parser_never_evaluates_code() -> None:
    v = parse_mad_verdict('{"Whether there is a preference": "__import__(\'os\')", "debate_answer": "x"}')
    assert v.preference is None and v.parse_error
    v = parse_mad_verdict('preference: yes, debate_answer: "Paris"')
    assert v.preference is True
    v = parse_mad_verdict('Sure! {"Reason": "r", "debate_answer": "Paris"} done', require_preference=False)
    assert v.answer == "Paris"


def test_mad_needs_two_debaters() -> None:
    with pytest.raises(ValueError, match="agents"):
        DebateConfig(protocol="mad", agents=3)
    with pytest.raises(ValueError, match="tit_for_tat"):
        DebateConfig.model_validate({"protocol": "mad", "mad": {"tit_for_tat": 4}})

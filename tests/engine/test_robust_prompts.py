"""The robust prompt style: rendering, parsing, and structured output with its text fallback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.prompts import get_prompts, paper, robust
from engine.protocols.madke import prompts_for as madke_prompts
from engine.protocols.madke.robust import ROBUST as madke_robust
from engine.result import DebateResult
from engine.runner import run_debate
from services.knowledge import KnowledgePool
from services.llm.client import OpenAIChatClient
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit
Q = "On what date in 1969 did Neil Armstrong first set foot on the moon?"


def test_knowledge_numbering_cannot_collide_with_the_answer_form(pool: KnowledgePool) -> None:
    text = robust.render_knowledge(pool.items)
    assert "(K1) Apollo 11:" in text and "[1]" not in text
    # The answer is a JSON field, asked for once at the end: no bracket form a K-number could fill.
    prompt = madke_robust.simultaneous(Q, pool.items)[1]["content"]
    assert prompt.rstrip().endswith(robust.ANSWER_INSTRUCTION)
    assert prompt.count('"answer":') == 2  # the marked example and the instruction
    assert "[" not in robust.ANSWER_INSTRUCTION
    assert "never reuse its answer" in prompt
    assert robust.parse_answer("Final answer: [K3]").answer is None
    assert robust.parse_answer("Final answer: (K2), K5").answer is None
    # Plain numbers are answers ("how many seasons", years): only K-references are refused.
    assert robust.parse_answer("Final answer: [1703]").answer == "1703"
    assert robust.parse_answer("Final answer: 8").answer == "8"
    assert paper.parse_answer("[3]").answer == "3"  # the paper style's collision, kept as published


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Reasoning...\nFinal answer: [July 20, 1969]", "July 20, 1969"),
        ("Final answer: The answer is Neil Armstrong. He was the commander.", "Neil Armstrong"),
        ("Final answer: [carbon dioxide]", None),  # the example's answer is never accepted
        ("Final answer: [short answer]", None),  # nor the placeholder
        ("I say [Buzz Aldrin]", "Buzz Aldrin"),
        ('{"reason": "Apollo 11 landed then.", "answer": "July 20, 1969"}', "July 20, 1969"),
        ('Sure!\n{"reason": "r", "answer": "The answer is Neil Armstrong. He led it."}', "Neil Armstrong"),
        ('{"reason": "see K3", "answer": "K3"}', None),  # a knowledge reference is not an answer
        ('{"reason": "copied", "answer": "carbon dioxide"}', None),
        ('{"reason": "nothing", "answer": ""}', None),
        ('{"reason": "r", "answer": "..."}', None),  # the template's placeholder
        ('{"reason": "Debater 1 is right.", "answer": "Debater 1"}', None),  # a label, not an answer
        ('{"reason": "r", "answer": "the short answer: 13th century"}', "13th century"),
        # A symbol is an answer (a wrong one here) even though SQuAD normalisation erases it; filler is not.
        ('{"reason": "The at symbol is named \'@\'.", "answer": "@"}', "@"),
        ('{"reason": "r", "answer": "\u2014"}', None),
        ('{"reason": "r", "answer": "?"}', None),
    ],
)
def test_robust_answer_parsing(text: str, answer: str | None) -> None:
    assert robust.parse_answer(text).answer == answer


def test_unusable_json_answers_say_why() -> None:
    parsed = robust.parse_answer('{"reason": "see K3", "answer": "(K3)"}')
    assert parsed.answer is None and "knowledge number" in (parsed.parse_error or "")
    assert "empty" in (robust.parse_answer('{"reason": "", "answer": " "}').parse_error or "")
    # The reason travels with the answer when other debaters are quoted.
    quoted = robust.answer_with_reason('{"reason": "Apollo 11 landed then.", "answer": "July 20, 1969"}')
    assert quoted == "[July 20, 1969] because: Apollo 11 landed then."


def test_agreeing_in_the_answer_slot_is_no_answer() -> None:
    # "Do you agree?" answered in the answer slot with the prompt's own words
    for reply in ("The other side is correct.", "the other side is wrong", "I agree"):
        parsed = robust.parse_answer(json.dumps({"reason": "It is Paris.", "answer": reply}))
        assert parsed.answer is None and parsed.parse_error
    assert robust.parse_answer('{"reason": "r", "answer": "the other side of the moon"}').answer


def test_a_reason_copied_into_an_answer_slot_is_recognised() -> None:
    long_reason = "Paris has been the capital since 987. " * 20  # cut when shown to others
    replies = [
        '{"reason": "The other side is correct. Lyon is the capital.", "answer": "Lyon"}',
        json.dumps({"reason": long_reason, "answer": "Paris"}),
        "Lyon is on the Rhône.\nFinal answer: [Lyon]",
    ]
    assert robust.copies_a_reason("the other side is correct.  Lyon is the capital", replies)
    assert robust.copies_a_reason(long_reason[: robust.REASON_LIMIT], replies)
    assert robust.copies_a_reason("Lyon is on the Rhône.", replies)  # a free-text reply's argument
    # the line as it was quoted, "[Lyon] because: …", without its brackets
    assert robust.copies_a_reason("Lyon because: The other side is correct. Lyon is the capital.", replies)
    # an answer the reasons mention, an answer of its own, nothing: not copies
    assert not robust.copies_a_reason("Lyon", replies)
    assert not robust.copies_a_reason("Paris", replies)
    assert not robust.copies_a_reason("Marseille", replies)
    assert not robust.copies_a_reason(None, replies) and not robust.copies_a_reason("x", [])


def test_an_unusable_reply_is_not_quoted_to_the_summarizer() -> None:
    # The 0.5B debater copied the format example; shown verbatim, its answer became the summary.
    copied = '{"reason": "Plants take in carbon dioxide during photosynthesis.", "answer": "carbon dioxide"}'
    user = madke_robust.summary(
        "architectural elements forming rib vaults", [copied, '{"reason": "r", "answer": "ribs"}']
    )
    text = user[-1]["content"]
    assert "carbon dioxide" not in text
    assert "- Debater 1: (no usable answer)" in text and "- Debater 2: [ribs] because: r" in text


def test_example_answers_are_declared_for_each_style() -> None:
    for style in ("paper", "robust"):
        prompts = get_prompts(style)
        assert prompts.EXAMPLE_ANSWERS
        example_text = madke_prompts(style).simultaneous(Q, [])[1]["content"]
        assert all(a in example_text for a in prompts.EXAMPLE_ANSWERS[:1])


def test_robust_selection_and_verdict_parsing() -> None:
    assert robust.parse_select('{"selected": [2, 12]}', 10, 3).ignored == [12]
    assert robust.parse_select("I pick (K2) and K5", 10, 3).selected == [2, 5]
    assert robust.parse_judge('{"consensus": false}').verdict is False
    assert robust.parse_judge("[Yes]").verdict is True


def script(server: ScriptedLLM) -> None:
    server.on("Which knowledge items", "(K1) helps", json_reply='{"selected": [1, 9]}')
    server.on("same answer", "[No]", json_reply='{"consensus": true}')
    answer = '{"reason": "Apollo 11 landed then.", "answer": "July 20, 1969"}'
    server.on("Debaters' final answers", "Final answer: [July 20, 1969]", json_reply=answer)
    server.on("Question:", "Apollo 11 landed then.\nFinal answer: [July 20, 1969]", json_reply=answer)


async def run(server: ScriptedLLM, pool: KnowledgePool, **cfg: Any) -> DebateResult:
    async with OpenAIChatClient(server.base_url, "scripted") as client:
        return await run_debate(Q, pool, DebateConfig(prompt_style="robust", **cfg), SingleModel(client))


async def test_structured_output_path(pool: KnowledgePool) -> None:
    with ScriptedLLM(schema_mode="honour") as server:
        script(server)
        result = await run(server, pool)
    sel = [r for r in result.transcript if r.role == "select"]
    assert all(r.output_mode == "schema" and r.selected == [1] and r.ignored_selection == [9] for r in sel)
    judge = [r for r in result.transcript if r.role == "judge"]
    assert judge[0].output_mode == "schema" and judge[0].verdict is True
    debaters = [r for r in result.transcript if r.role in ("debater", "summarizer")]
    assert all(r.output_mode == "schema" and r.parse_error is None for r in debaters)
    assert result.rounds == 1 and result.answer == "July 20, 1969"
    schema_requests = [b for b in server.requests if "response_format" in b]
    assert len(schema_requests) == 5  # two selections, two answers and the judge
    # The debaters agreed, so their answer is the answer: no summary call.
    assert not any(r.role == "summarizer" for r in result.transcript)
    assert result.answer_source.startswith("the debaters' agreed final answer")


async def test_structured_output_falls_back_to_text(pool: KnowledgePool) -> None:
    with ScriptedLLM(schema_mode="reject") as server:
        script(server)
        result = await run(server, pool)
    sel = [r for r in result.transcript if r.role == "select"]
    assert all(r.output_mode == "text" and r.selected == [1] for r in sel)
    assert all("K-number" in (r.parse_error or "") for r in sel)
    debaters = [r for r in result.transcript if r.role == "debater"]
    assert all(r.output_mode == "text" and r.answer == "July 20, 1969" for r in debaters)
    judge = [r for r in result.transcript if r.role == "judge"]
    assert judge[0].output_mode == "text" and judge[0].verdict is False
    assert result.rounds == 3


async def test_summarizer_is_asked_only_when_the_debaters_differ(pool: KnowledgePool) -> None:
    with ScriptedLLM() as server:
        server.on("Which knowledge items", "", json_reply='{"selected": []}')
        server.on("same answer", "", json_reply='{"consensus": false}')
        server.on("Debaters' final answers", "", json_reply='{"reason": "K1 says so.", "answer": "July 20"}')
        server.on(
            "Question:",
            "",
            json_reply=[
                '{"reason": "r", "answer": "July 20, 1969"}',
                '{"reason": "r", "answer": "July 21, 1969"}',
            ],
        )
        result = await run(server, pool, rounds=1)
    summaries = [r for r in result.transcript if r.role == "summarizer"]
    assert len(summaries) == 1 and result.answer == "July 20" and result.answer_source == "summarizer"


async def test_rule_judge_needs_no_call_and_both_requires_agreement(pool: KnowledgePool) -> None:
    with ScriptedLLM() as server:
        script(server)
        server.rules.insert(0, server.on("same answer", "", json_reply='{"consensus": true}'))
        result = await run(server, pool, judge="rule")
        assert not any(r.role == "judge" for r in result.transcript) and result.rounds == 1
        server.reset()
        server.on("Which knowledge items", "", json_reply='{"selected": []}')
        server.on("same answer", "", json_reply='{"consensus": true}')
        server.on("Debaters' final answers", "Final answer: [July 20, 1969]")
        server.on("Question:", ["Final answer: [July 20, 1969]", "Final answer: [July 21, 1969]"])
        result = await run(server, pool, judge="both", rounds=1)
    judge = next(r for r in result.transcript if r.role == "judge")
    # The LLM said consensus, the answers differ: "both" keeps debating and records each verdict.
    assert judge.verdict is True and judge.extra["rule_verdict"] is False
    assert result.consensus is False


def test_prompts_share_their_prefix_across_agents(pool: KnowledgePool) -> None:
    a = robust.select(Q, pool.items, None)[1]["content"]
    b = robust.select(Q, pool.items, "Final answer: [X]")[1]["content"]
    common = len(a) if a == b else next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert common >= len(robust.render_knowledge(pool.items))

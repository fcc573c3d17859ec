"""``mad`` in the robust style: one-sentence roles, (K3) knowledge, JSON answers and verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.prompts.robust import (
    ANSWER_INSTRUCTION,
    answer_with_reason,
    render_knowledge,
)
from engine.prompts.robust import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.protocols.mad.prompts import TIT_FOR_TAT, with_knowledge
from services.knowledge import KnowledgeItem

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "preference": {"type": "boolean"},
        "supported_side": {"type": "string", "enum": ["affirmative", "negative", "none"]},
        "reason": {"type": "string"},
        "debate_answer": {"type": "string"},
    },
    "required": ["preference", "supported_side", "debate_answer"],
    "additionalProperties": False,
}
FINAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "debate_answer": {"type": "string"}},
    "required": ["debate_answer"],
    "additionalProperties": False,
}

ANSWER_TAIL = "\n\n" + ANSWER_INSTRUCTION


def debater_system(question: str, level: int, side: str) -> str:
    return (
        f"You are the {side} side in a debate about a factual question. {TIT_FOR_TAT[level]} "
        f"Question: {question}"
    )


def opening(question: str, knowledge: Sequence[KnowledgeItem]) -> str:
    return with_knowledge(render_knowledge, f"Question: {question}" + ANSWER_TAIL, knowledge)


def rebut_first(affirmative: str, knowledge: Sequence[KnowledgeItem]) -> str:
    text = (
        f"The affirmative side says: {answer_with_reason(affirmative)}\n\n"
        "You disagree with this answer. Give your own answer and reasons." + ANSWER_TAIL
    )
    return with_knowledge(render_knowledge, text, knowledge)


def respond(opponent: str, knowledge: Sequence[KnowledgeItem]) -> str:
    text = (
        f"The other side says: {answer_with_reason(opponent)}\n\n"
        "Do you agree? Give your reasons and your answer." + ANSWER_TAIL
    )
    return with_knowledge(render_knowledge, text, knowledge)


def moderator_system(question: str) -> str:
    return (
        "You moderate a debate about a factual question and decide whether one side's answer is clearly "
        f"correct. Question: {question}"
    )


def moderator(round: int, affirmative: str, negative: str) -> str:
    return (
        f"Round {round} has ended.\n"
        f"- Affirmative: {answer_with_reason(affirmative)}\n"
        f"- Negative: {answer_with_reason(negative)}\n\n"
        "Is one side clearly correct? Reply with JSON only: "
        '{"preference": true or false, "supported_side": "affirmative" or "negative" or "none", '
        '"reason": "...", "debate_answer": "..."}\n'
        "reason: one short sentence. debate_answer: the answer you think is correct, only the name, "
        "date, number or few words, or empty when neither side is clearly correct."
    )


def judge_candidates(affirmative: str, negative: str) -> str:
    return (
        f"- Affirmative: {answer_with_reason(affirmative)}\n"
        f"- Negative: {answer_with_reason(negative)}\n\n"
        "List the answer candidates, one per line, without reasons."
    )


def judge_final(question: str) -> str:
    return (
        f"Question: {question}\nWhich candidate is correct? Reply with JSON only: "
        '{"reason": "...", "debate_answer": "..."}\n'
        "reason: one short sentence. debate_answer: only the name, date, number or few words of the "
        "candidate that answers the question."
    )

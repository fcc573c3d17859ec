"""MADKE's debate prompts in Parley's robust style (see ``engine.prompts.robust`` for what it changes).

The judge sees the debaters' extracted short answers, not their whole replies; a unanimous final
answer is taken as it is, and the summarizer only chooses between differing answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.prompts.compose import join_blocks, system_user
from engine.prompts.robust import (
    ANSWER_INSTRUCTION,
    DEBATER_ROLE,
    EXAMPLE,
    answer_with_reason,
    render_knowledge,
    short_answer,
)

# Re-exported (``X as X``): part of this protocol's prompt interface.
from engine.prompts.robust import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.prompts.robust import parse_answer as parse_answer
from engine.prompts.robust import parse_judge as parse_judge
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

JUDGE_ROLE = "You check whether several short answers say the same thing."
SUMMARIZER_ROLE = "You pick the final answer that the debaters' answers and reasons best support."
# A unanimous final answer is the answer; the summarizer is asked only when the debaters differ.
SUMMARIZE_AGREEMENT = False
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"consensus": {"type": "boolean"}},
    "required": ["consensus"],
    "additionalProperties": False,
}


def simultaneous(question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]:
    return system_user(
        DEBATER_ROLE,
        join_blocks(EXAMPLE, render_knowledge(knowledge), f"Question: {question}", ANSWER_INSTRUCTION),
    )


def orderly(
    question: str, knowledge: Sequence[KnowledgeItem], others: Sequence[str], own_history: Sequence[str]
) -> list[ChatMessage]:
    other_block = "Other debaters' answers:\n" + "\n".join(
        f"- Debater {i}: {answer_with_reason(a)}" for i, a in enumerate(others, start=1)
    )
    own = f"Your previous answer: {answer_with_reason(own_history[-1])}" if own_history else ""
    guidance = (
        "Check the knowledge and the other answers. Keep your answer if the evidence supports it; "
        "change it if another answer is better supported."
    )
    # What stays the same from round to round comes first (the example, the chosen items, the
    # question: round 1's whole prompt but its last line), so the agent's server slot re-reads only
    # the other answers and the instructions.
    return system_user(
        DEBATER_ROLE,
        join_blocks(
            EXAMPLE,
            render_knowledge(knowledge),
            f"Question: {question}",
            other_block,
            own,
            guidance,
            ANSWER_INSTRUCTION,
        ),
    )


def judge(question: str, responses: Sequence[str]) -> list[ChatMessage]:
    answers = "\n".join(
        f"- Debater {i}: {short_answer(r) or '(no answer)'}" for i, r in enumerate(responses, start=1)
    )
    return system_user(
        JUDGE_ROLE,
        join_blocks(
            f"Question: {question}",
            f"Short answers:\n{answers}",
            "Do all debaters give the same answer (the same person, place, date, number or thing, even if "
            'worded differently)? Reply with JSON only: {"consensus": true} or {"consensus": false}.',
        ),
    )


def summary(question: str, responses: Sequence[str]) -> list[ChatMessage]:
    listing = "\n".join(f"- Debater {i}: {answer_with_reason(r)}" for i, r in enumerate(responses, start=1))
    return system_user(
        SUMMARIZER_ROLE,
        join_blocks(
            f"Question: {question}",
            f"Debaters' final answers:\n{listing}",
            "Give the answer the debaters agree on, or the best supported one if they differ. Do not add "
            "new facts.",
            ANSWER_INSTRUCTION,
        ),
    )

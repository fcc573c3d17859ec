"""Single-agent baselines in Parley's robust style: the format example, then the question."""

from __future__ import annotations

from collections.abc import Sequence

from engine.prompts.compose import join_blocks, system_user
from engine.prompts.robust import (
    ANSWER_INSTRUCTION,
    DEBATER_ROLE,
    EXAMPLE,
)

# Re-exported (``X as X``): part of this protocol's prompt interface.
from engine.prompts.robust import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.prompts.robust import parse_answer as parse_answer
from engine.protocols.madke.robust import simultaneous
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


def standard(question: str) -> list[ChatMessage]:
    return system_user(
        DEBATER_ROLE,
        join_blocks(
            EXAMPLE,
            f"Question: {question}",
            "Answer directly. " + ANSWER_INSTRUCTION,
        ),
    )


def chain_of_thought(question: str) -> list[ChatMessage]:
    return system_user(
        DEBATER_ROLE,
        join_blocks(EXAMPLE, f"Question: {question}", "Let's think step by step. " + ANSWER_INSTRUCTION),
    )


def rag(question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]:
    return simultaneous(question, knowledge)

"""``society`` in the paper style: Du et al.'s prompts, multi-turn (see ``prompts.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from engine.prompts import paper
from engine.prompts.compose import join_blocks
from engine.prompts.paper import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.protocols.common import CONFIDENCE_INSTRUCTION
from engine.protocols.society.prompts import View, confidence_note
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

# The confidence is a line of the free-text reply ("Confidence: N").
CONFIDENCE_SCHEMA = None


def first(question: str, knowledge: Sequence[KnowledgeItem], confidence: bool) -> str:
    parts = [
        paper.render_knowledge(knowledge),
        f"Can you answer the following question as accurately as possible? {question} Explain your "
        "answer, putting the answer in the form [answer] at the end of your response.",
    ]
    if confidence:
        parts.append(CONFIDENCE_INSTRUCTION + ".")
    return join_blocks(*parts)


def update(
    question: str, knowledge: Sequence[KnowledgeItem], others: Sequence[View], confidence: bool
) -> str:
    blocks = "".join(
        f"\n\n One agent solution{confidence_note(v, confidence)}: ```{paper.truncate(v.text)}```"
        for v in others
    )
    parts = [
        paper.render_knowledge(knowledge),
        "These are the solutions to the problem from other agents: " + blocks,
        "Using the reasoning from other agents as additional advice, can you give an updated answer? "
        "Examine your solution and that other agents step by step. Put your answer in the form [answer] "
        "at the end of your response.",
    ]
    if confidence:
        parts.append(CONFIDENCE_INSTRUCTION + ".")
    return join_blocks(*parts)


def messages(
    question: str,
    knowledge: Sequence[KnowledgeItem],
    others_by_round: Sequence[Sequence[View]],
    own_history: Sequence[str],
    *,
    confidence: bool,
    persona: str | None = None,
) -> list[ChatMessage]:
    msgs: list[ChatMessage] = []
    if persona:
        msgs.append({"role": "system", "content": persona})
    # Only the current round carries knowledge, so old rounds do not repeat the pool text.
    msgs.append(
        {"role": "user", "content": first(question, knowledge if not own_history else (), confidence)}
    )
    for r, own in enumerate(own_history):
        msgs.append({"role": "assistant", "content": paper.truncate(own)})
        last = r == len(own_history) - 1
        msgs.append(
            {
                "role": "user",
                "content": update(question, knowledge if last else (), others_by_round[r], confidence),
            }
        )
    return msgs

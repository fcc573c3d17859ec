"""Single-agent baselines in the paper style (MADKE paper §4.2)."""

from __future__ import annotations

from collections.abc import Sequence

from engine.prompts.compose import join_blocks

# Re-exported (``X as X``): part of this protocol's prompt interface.
from engine.prompts.paper import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.prompts.paper import EXAMPLE, STEP
from engine.prompts.paper import parse_answer as parse_answer
from engine.protocols.madke.paper import simultaneous
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

STANDARD_EXAMPLE = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\nAnswer: [Bridget Driscoll]"
)


def standard(question: str) -> list[ChatMessage]:
    """Standard prompting (Brown et al.): a one-shot demonstration fixes the output format."""
    return [
        {
            "role": "user",
            "content": join_blocks(
                "Answer the question and put the answer in the form [answer]. Here is an example:\n"
                + STANDARD_EXAMPLE
                + "\n(END OF EXAMPLE)",
                f"Question: {question}\nAnswer:",
            ),
        }
    ]


def chain_of_thought(question: str) -> list[ChatMessage]:
    """Zero-shot CoT's magic phrase plus a one-shot CoT demonstration (the paper's CoT baseline)."""
    return [
        {
            "role": "user",
            "content": join_blocks(
                "Answer the question and put the answer in the form [answer]. Here is an example:\n"
                + EXAMPLE
                + "\n(END OF EXAMPLE)",
                f"Question: {question}\n{STEP}",
            ),
        }
    ]


def rag(question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]:
    """Retrieval-augmented generation: one agent with the whole pool, Prompt 3.2's wording."""
    return simultaneous(question, knowledge)

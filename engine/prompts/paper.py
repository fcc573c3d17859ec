"""The paper style's shared vocabulary: MADKE's debater role, knowledge selection (Prompt 3.1),
answer form ``[answer]`` and parsers, as published; each protocol's own prompts build on it.

Where the paper leaves a slot unspecified ({example}, {examples}, how knowledge is listed) the choices
are the plainest ones consistent with it, and the knowledge list and role prompt come first so the
prompts of different agents share their longest possible prefix (the server's KV cache reuses it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engine.parsing import (
    ParsedAnswer,
    ParsedSelection,
    ParsedVerdict,
    parse_bracket_answer,
    parse_selection,
    parse_verdict,
)
from engine.prompts.compose import join_blocks, system_user
from engine.prompts.search import search_passage as search_passage
from engine.prompts.untrusted import knowledge_block
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

STYLE = "paper"

DEBATER_ROLE = (
    "You are an intelligent, diplomatic, and assertive debate agent. Your task is to engage in "
    "intellectual debates with other agents, striving to reach a consensus on various topics. It's "
    "crucial to maintain your stance when you are confident about the correctness of your opinion. "
    "However, if you identify an error in your argument, you should promptly acknowledge it and amend "
    "your stance with the correct information. Your ultimate goal is to contribute to an informed, "
    "balanced, and accurate discussion."
)
# The one-shot example of Prompt 3.2 and the standard-prompting baseline (the paper does not print it).
EXAMPLE = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\n"
    "Answer: Let's think step by step! The first recorded pedestrian killed by a motor car in Britain "
    "was Bridget Driscoll, in London in 1896. Therefore, the answer is [Bridget Driscoll]."
)
STEP = "Answer: Let's think step by step!"
# Answers that only an example could have produced (the evaluation counts copies of them).
EXAMPLE_ANSWERS = ("Bridget Driscoll", "Canberra")


def render_knowledge(items: Sequence[KnowledgeItem]) -> str:
    """The items as quoted data in a delimited block (``prompts.untrusted``)."""
    return knowledge_block(items, "[{n}]")


def select(question: str, pool: Sequence[KnowledgeItem], previous_answer: str | None) -> list[ChatMessage]:
    """Prompt 3.1 (adaptive knowledge selection); from round 2 the agent's previous answer is included."""
    instruction = (
        "Please select knowledge from the knowledge pool that will help you answer the question. If the "
        "knowledge pool does not contain the information needed to answer the question, add [No Found] "
        "at the end of your response. If the knowledge pool has knowledge that can help you answer the "
        "question, please return up to 3 of the most helpful knowledge. Put the number in square brackets."
    )
    history = f"Your previous answer: {previous_answer}" if previous_answer else ""
    return system_user(
        DEBATER_ROLE,
        join_blocks(instruction, render_knowledge(pool), history, f"Question: {question}\n{STEP}"),
    )


def truncate(text: str, limit: int = 1500) -> str:
    """Bound how much of another agent's reply is quoted, so prompts cannot grow without limit."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " …"


def parse_answer(text: str) -> ParsedAnswer:
    return parse_bracket_answer(text)


def parse_select(text: str, pool_size: int, max_selected: int) -> ParsedSelection:
    return parse_selection(text, pool_size, max_selected)


def parse_judge(text: str) -> ParsedVerdict:
    return parse_verdict(text)


# The paper asks for free text everywhere; structured output is a robust-style feature.
ANSWER_SCHEMA = None
# Items are shown as ``[n]``: a reply of only numbers (``3``, ``[2]``, ``1, 4``) is a knowledge label.
KNOWLEDGE_LABEL = re.compile(r"^\s*\[?\s*\d+(?:\s*[,;]\s*\d+)*\s*\]?\s*$")
SELECT_SCHEMA = None
# ``judge=auto``: the paper's LLM judge alone (Eq. 5).
AUTO_JUDGE = "llm"

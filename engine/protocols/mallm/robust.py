"""``mallm`` in the robust style: the same flow in ``prompts/robust.py`` conventions, JSON turns and votes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.prompts import paper, robust
from engine.prompts.compose import join_blocks, system_user
from engine.prompts.robust import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.protocols.mallm.prompts import persona_line, solution_list
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

VOTE_SCHEMAS: Mapping[str, dict[str, Any] | None] = {
    "simple": {
        "type": "object",
        "properties": {"vote": {"type": "integer"}},
        "required": ["vote"],
        "additionalProperties": False,
    },
    "approval": {
        "type": "object",
        "properties": {"approved": {"type": "array", "items": {"type": "integer"}}},
        "required": ["approved"],
        "additionalProperties": False,
    },
    "ranked": {
        "type": "object",
        "properties": {"ranking": {"type": "array", "items": {"type": "integer"}}},
        "required": ["ranking"],
        "additionalProperties": False,
    },
    "cumulative": {
        "type": "object",
        "properties": {"points": {"type": "object", "additionalProperties": {"type": "integer"}}},
        "required": ["points"],
        "additionalProperties": False,
    },
}

# A turn after the first of the memory and drafting paradigms also says whether it agrees with the
# current solution: a JSON boolean the agreement parser reads, so the [AGREE] tag of the paper's
# wording is not needed beside the JSON answer.
AGREEMENT_SCHEMA = robust.answer_schema_with("agree", {"type": "boolean"}, first=True)
AGREEMENT_INSTRUCTION = (
    'Reply with JSON only: {"agree": true or false, "reason": "...", "answer": "..."}\n'
    "agree: true if the current solution is right. " + robust.ANSWER_RULES
)


def system(persona: str | None, agent: int) -> str:
    return robust.DEBATER_ROLE + f" Your role: {persona_line(persona, agent)}."


def discussion(
    question: str,
    knowledge: Sequence[KnowledgeItem],
    history: Sequence[tuple[str, str]],
    current_solution: str | None,
    *,
    persona: str | None,
    agent: int,
    agreement: bool,
) -> list[ChatMessage]:
    hist = "\n".join(f"- {who}: {robust.answer_with_reason(text)}" for who, text in history)
    if agreement:
        ask = "Say whether the current solution is right, and give your own answer either way."
    elif history:
        ask = "Improve your own answer using the other participants' answers as advice."
    else:
        ask = "Answer on your own."
    user = join_blocks(
        robust.EXAMPLE,
        robust.render_knowledge(knowledge),
        f"Discussion so far:\n{hist}" if hist else "",
        f"Current solution: [{current_solution}]" if current_solution and agreement else "",
        f"Question: {question}",
        ask,
        AGREEMENT_INSTRUCTION if agreement else robust.ANSWER_INSTRUCTION,
    )
    return system_user(system(persona, agent), user)


def extraction(question: str, previous: str, persona: str | None, agent: int) -> list[ChatMessage]:
    user = join_blocks(
        f"Question: {question}",
        f"Your previous response: {paper.truncate(previous, 800)}",
        "Give the solution from your previous response without agreement statements or explanations.",
        robust.ANSWER_INSTRUCTION,
    )
    return system_user(system(persona, agent), user)


def vote(
    decision: str,
    question: str,
    solutions: Sequence[str],
    *,
    base: int,
    points: int,
    persona: str | None,
    agent: int,
) -> list[ChatMessage]:
    tail = {
        "simple": 'Vote for the best solution. Reply with JSON only: {"vote": <solution number>}',
        "approval": "Approve every solution you think is correct (at least one). Reply with JSON only: "
        '{"approved": [<solution numbers>]}',
        "cumulative": f"Distribute {points} points among the solutions, more points to better ones, "
        f"{points} in total. Reply with JSON only: " + '{"points": {"<solution number>": <points>, ...}}',
        "ranked": "Rank the solutions from best to worst. Reply with JSON only: "
        '{"ranking": [<best solution number>, ..., <worst>]}',
    }[decision]
    user = join_blocks(
        f"Question: {question}", f"Possible solutions:\n{solution_list(solutions, base)}", tail
    )
    return system_user(system(persona, agent), user)

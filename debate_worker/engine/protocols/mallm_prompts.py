"""Prompts of Kaesberg et al. (2025), MALLM decision protocols, in Parley's two styles.

Paper style: the voting prompts of Appendix E.2 (Figs. 16-19) and the final-answer extraction prompt
of E.1 verbatim (persona slots filled from the team spec, or "Participant i"), and for the discussion
turns MALLM's "Simple" response generator as the paper describes it (§3.2, App. C: neutral prompt,
the task repeated every turn, agreement with the previous message stated as [AGREE]/[DISAGREE]).
The ranked prompt's example is rendered with the configured solution numbering (the paper's example
is 0-based while its lists start at 1). Robust style: the same flow in ``prompts/robust.py``
conventions, votes as JSON with a schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from debate_worker.engine.prompts import paper, robust
from debate_worker.engine.prompts.compose import join_blocks
from services.knowledge import KnowledgeItem
from services.llm import ChatMessage

TASK = "Answer the question."

VOTE_SCHEMAS: dict[str, dict[str, Any]] = {
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


def persona_line(persona: str | None, agent: int) -> str:
    return persona or f"Participant {agent + 1} (a knowledgeable member of the discussion)"


def system(style: str, persona: str | None, agent: int) -> str:
    if style == "paper":
        return f"Your role: {persona_line(persona, agent)}"
    return robust.DEBATER_ROLE + f" Your role: {persona_line(persona, agent)}."


def _knowledge(style: str, items: Sequence[KnowledgeItem]) -> str:
    return (paper if style == "paper" else robust).render_knowledge(items)


def discussion(
    style: str,
    question: str,
    knowledge: Sequence[KnowledgeItem],
    history: Sequence[tuple[str, str]],
    current_solution: str | None,
    *,
    persona: str | None,
    agent: int,
    agreement: bool,
) -> list[ChatMessage]:
    """One discussion turn. ``history``: (speaker, message) pairs the agent remembers.

    With ``agreement`` (memory/drafting paradigms after the first message) the agent states whether it
    agrees with the previous message; without (drafts, Collective Improvement) it just answers.
    """
    if style == "paper":
        hist = "\n".join(f"{who}: {paper.truncate(text, 800)}" for who, text in history)
        if agreement:
            ask = (
                "Improve the current solution. If you agree with the current solution, start your answer "
                "with [AGREE] and explain why; otherwise start with [DISAGREE], explain why and propose "
                "an improved solution. Put the solution in the form [answer]."
            )
        elif history:
            ask = (
                "Here are the other participants' solutions from the previous turn. Improve your own "
                "solution. Put the solution in the form [answer]."
            )
        else:
            ask = "Propose a solution. Put the solution in the form [answer]."
        user = join_blocks(
            f"Task: {TASK}\nInput: {question}",
            _knowledge(style, knowledge),
            f"Here is the discussion so far:\n{hist}"
            if hist and agreement
            else (f"Solutions:\n{hist}" if hist else ""),
            f"Current solution: {current_solution}" if current_solution and agreement else "",
            ask,
        )
    else:
        hist = "\n".join(f"- {who}: {robust.answer_with_reason(text)}" for who, text in history)
        if agreement:
            ask = (
                "Start with [AGREE] if the current solution is right, or [DISAGREE] if not, then explain "
                "briefly. Give your own answer either way."
            )
        elif history:
            ask = "Improve your own answer using the other participants' answers as advice."
        else:
            ask = "Answer on your own."
        user = join_blocks(
            robust.EXAMPLE,
            _knowledge(style, knowledge),
            f"Discussion so far:\n{hist}" if hist else "",
            f"Current solution: [{current_solution}]" if current_solution and agreement else "",
            f"Question: {question}",
            ask,
            robust.ANSWER_INSTRUCTION,
        )
    return [{"role": "system", "content": system(style, persona, agent)}, {"role": "user", "content": user}]


def extraction(
    style: str, question: str, previous: str, persona: str | None, agent: int
) -> list[ChatMessage]:
    """E.1: the final solution extracted from the last agent's previous response."""
    if style == "paper":
        user = (
            "You are tasked with creating a final solution based on the given input and your previous "
            f"response. Task: {TASK}\nInput: {question}\nYour previous response: {paper.truncate(previous)}\n"
            "Extract the final solution to the task from the provided text. Remove statements of agreement, "
            "disagreement, and explanations. Do not modify the text. Do not output any text besides the "
            "solution. If there is no solution provided, just copy the previous response."
        )
    else:
        user = join_blocks(
            f"Question: {question}",
            f"Your previous response: {paper.truncate(previous, 800)}",
            "Give the solution from your previous response without agreement statements or explanations.",
            robust.ANSWER_INSTRUCTION,
        )
    return [{"role": "system", "content": system(style, persona, agent)}, {"role": "user", "content": user}]


def vote(
    style: str,
    decision: str,
    question: str,
    solutions: Sequence[str],
    *,
    base: int,
    points: int,
    persona: str | None,
    agent: int,
) -> list[ChatMessage]:
    """E.2 (Figs. 16-19): one agent's vote over the numbered solutions."""
    listing = "\n".join(f"Solution {i + base}: {s}" for i, s in enumerate(solutions))
    if style == "paper":
        head = {
            "simple": "You are tasked with voting for the best solution from the list provided below based "
            "on "
            "the given task.",
            "approval": "You are tasked with approving any number of solutions from the list provided below "
            "based on the given task.",
            "cumulative": f"You are tasked with distributing {points} points among the provided solutions "
            "based on the given task.",
            "ranked": "You are tasked with ranking the solutions from the most preferred to the least "
            "preferred "
            "based on the given task.",
        }[decision]
        a, b, c = base, base + 2, base + 1
        tail = {
            "simple": "Based on the above solutions, please provide the number of the solution you are "
            "voting "
            "for. Answer only with the number.",
            "approval": "Based on the above solutions, please provide the numbers of the solutions you are "
            "approving, separated by commas. Answer only with the numbers.",
            "cumulative": f"Based on the above solutions, please distribute {points} points among the "
            "solutions. Provide your points allocation as a JSON dictionary where keys are solution numbers "
            f"(as int) and values are the points. The total points should sum up to {points}. Answer only "
            "with the JSON dictionary.",
            "ranked": "Based on the above solutions, please provide the rankings of the solutions "
            "separated by "
            f"spaces. Example: '{a} {b} {c}' if you prefer Solution {a} the most, then Solution {b}, and "
            f"finally Solution {c}. Provide up to 5 rankings. Only answer with the rankings.",
        }[decision]
        user = (
            f"{head} Task: {TASK}\nQuestion: {question}\nHere are the possible solutions:\n{listing}\n{tail}"
        )
    else:
        tail = {
            "simple": 'Vote for the best solution. Reply with JSON only: {"vote": <solution number>}',
            "approval": "Approve every solution you think is correct (at least one). Reply with JSON only: "
            '{"approved": [<solution numbers>]}',
            "cumulative": f"Distribute {points} points among the solutions, more points to better ones, "
            f"{points} in total. Reply with JSON only: " + '{"points": {"<solution number>": <points>, ...}}',
            "ranked": "Rank the solutions from best to worst. Reply with JSON only: "
            '{"ranking": [<best solution number>, ..., <worst>]}',
        }[decision]
        user = join_blocks(f"Question: {question}", f"Possible solutions:\n{listing}", tail)
    return [{"role": "system", "content": system(style, persona, agent)}, {"role": "user", "content": user}]

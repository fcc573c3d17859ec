"""``mallm`` in the paper style: Appendix E prompts verbatim, MALLM's "Simple" discussion turns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.prompts.compose import join_blocks, system_user
from engine.prompts.paper import render_knowledge, truncate
from engine.protocols.mallm.prompts import TASK, persona_line, solution_list
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

# The paper's turns, extractions and ballots are free text (a ballot: a number, numbers, a ranking or
# a JSON dictionary).
ANSWER_SCHEMA = None
AGREEMENT_SCHEMA = None
VOTE_SCHEMAS: Mapping[str, dict[str, Any] | None] = dict.fromkeys(
    ("simple", "approval", "ranked", "cumulative")
)


def system(persona: str | None, agent: int) -> str:
    return f"Your role: {persona_line(persona, agent)}"


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
    hist = "\n".join(f"{who}: {truncate(text, 800)}" for who, text in history)
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
        render_knowledge(knowledge),
        f"Here is the discussion so far:\n{hist}"
        if hist and agreement
        else (f"Solutions:\n{hist}" if hist else ""),
        f"Current solution: {current_solution}" if current_solution and agreement else "",
        ask,
    )
    return system_user(system(persona, agent), user)


def extraction(question: str, previous: str, persona: str | None, agent: int) -> list[ChatMessage]:
    user = (
        "You are tasked with creating a final solution based on the given input and your previous "
        f"response. Task: {TASK}\nInput: {question}\nYour previous response: {truncate(previous)}\n"
        "Extract the final solution to the task from the provided text. Remove statements of agreement, "
        "disagreement, and explanations. Do not modify the text. Do not output any text besides the "
        "solution. If there is no solution provided, just copy the previous response."
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
    listing = solution_list(solutions, base)
    user = f"{head} Task: {TASK}\nQuestion: {question}\nHere are the possible solutions:\n{listing}\n{tail}"
    return system_user(system(persona, agent), user)

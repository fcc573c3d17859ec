"""Prompts of Liang et al. (2024), MAD with divergent thinking, in Parley's two styles.

Paper style: the meta prompts of §2 with the "tit for tat" sentence of the chosen level (Table 11), the
affirmative/negative debater prompts, the moderator prompt of §2 and the JSON verdict and two-step
extractive judge of the authors' released configuration (github.com/Skytliang/Multi-Agents-Debate,
``config4all.json``), which the paper describes but does not print. Robust style: the same flow with
one-sentence roles, (K3) knowledge, short answers asked for as ``Final answer: [...]`` and the
verdicts as JSON with a schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from debate_worker.engine.prompts import paper, robust
from services.knowledge import KnowledgeItem
from services.llm import ChatMessage

# Table 11: level 2 is the sentence of the default meta prompt.
TIT_FOR_TAT = {
    0: "Both sides must reach a full consensus on every point of the debate. Every statement must be "
    "agreed upon by both sides.",
    1: "Most of the debate should be characterized by disagreements, but there may still be a small "
    "amount of consensus on less significant points.",
    2: "It's not necessary to fully agree with each other's perspectives, as our objective is to find "
    "the correct answer.",
    3: "Both sides must disagree with each other on every point of the debate. There should be no "
    "consensus whatsoever.",
}

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

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def ordinal(r: int) -> str:
    return ORDINALS[r - 1] if 1 <= r <= len(ORDINALS) else f"{r}th"


def _with_knowledge(style: str, text: str, knowledge: Sequence[KnowledgeItem]) -> str:
    rendered = (paper if style == "paper" else robust).render_knowledge(knowledge)
    return f"{rendered}\n\n{text}" if rendered else text


def debater_system(style: str, question: str, level: int, side: str) -> str:
    """The meta prompt plus the side's debater prompt (§2)."""
    side_prompt = (
        "You are affirmative side. Please express your viewpoints."
        if side == "affirmative"
        else "You are negative side. You disagree with the affirmative side's points. Provide your reasons "
        "and answer."
    )
    if style == "paper":
        return (
            "You are a debater. Hello and welcome to the debate competition. "
            f"{TIT_FOR_TAT[level]} The debate topic is stated as follows: {question}\n\n{side_prompt}"
        )
    return (
        f"You are the {side} side in a debate about a factual question. {TIT_FOR_TAT[level]} "
        f"Question: {question}"
    )


def _answer_tail(style: str) -> str:
    return "" if style == "paper" else "\n\n" + robust.ANSWER_INSTRUCTION


def opening(style: str, question: str, knowledge: Sequence[KnowledgeItem]) -> str:
    """The affirmative's first turn: the topic itself."""
    if style == "paper":
        return _with_knowledge(style, question, knowledge)
    return _with_knowledge(style, f"Question: {question}" + _answer_tail(style), knowledge)


def rebut_first(style: str, affirmative: str, knowledge: Sequence[KnowledgeItem]) -> str:
    """The negative's first turn: the affirmative's answer to disagree with."""
    if style == "paper":
        text = f"{affirmative}\n\nYou disagree with my answer. Provide your answer and reasons."
    else:
        text = (
            f"The affirmative side says: {robust.answer_with_reason(affirmative)}\n\n"
            "You disagree with this answer. Give your own answer and reasons." + _answer_tail(style)
        )
    return _with_knowledge(style, text, knowledge)


def respond(style: str, opponent: str, knowledge: Sequence[KnowledgeItem]) -> str:
    """Later turns of both sides: the opponent's last argument."""
    if style == "paper":
        text = f"{opponent}\n\nDo you agree with my perspective? Please provide your reasons and answer."
    else:
        text = (
            f"The other side says: {robust.answer_with_reason(opponent)}\n\n"
            "Do you agree? Give your reasons and your answer." + _answer_tail(style)
        )
    return _with_knowledge(style, text, knowledge)


def moderator_system(style: str, question: str) -> str:
    if style == "paper":
        return (
            "You are a moderator. There will be two debaters involved in a debate competition. They will "
            f"present their answers and discuss their perspectives on the {question}. At the end of each "
            "round, you will evaluate both sides' answers and decide which one is correct."
        )
    return (
        "You moderate a debate about a factual question and decide whether one side's answer is clearly "
        f"correct. Question: {question}"
    )


def moderator(style: str, round: int, affirmative: str, negative: str) -> str:
    if style == "paper":
        return (
            f"Now the {ordinal(round)} round of debate for both sides has ended.\n\n"
            f"Affirmative side arguing:\n{paper.truncate(affirmative)}\n\n"
            f"Negative side arguing: {paper.truncate(negative)}\n\n"
            "You, as the moderator, will evaluate both sides' answers and determine if there is a clear "
            "preference for an answer candidate. If so, please summarize your reasons for supporting "
            "affirmative/negative side and give the final answer that you think is correct, and the "
            "debate will conclude. If not, the debate will continue to the next round. Now please output "
            'your answer in json format, with the format as follows: {"Whether there is a preference": '
            '"Yes or No", "Supported Side": "Affirmative or Negative", "Reason": "", '
            '"debate_answer": ""}. Please strictly output in JSON format, do not output irrelevant '
            "content."
        )
    return (
        f"Round {round} has ended.\n"
        f"- Affirmative: {robust.answer_with_reason(affirmative)}\n"
        f"- Negative: {robust.answer_with_reason(negative)}\n\n"
        "Is one side clearly correct? Reply with JSON only: "
        '{"preference": true or false, "supported_side": "affirmative" or "negative" or "none", '
        '"reason": "one sentence", "debate_answer": "the short answer you think is correct, or empty"}'
    )


def judge_candidates(style: str, affirmative: str, negative: str) -> str:
    """Extractive judge, step 1: the answer candidates."""
    if style == "paper":
        return (
            f"Affirmative side arguing: {paper.truncate(affirmative)}\n\n"
            f"Negative side arguing: {paper.truncate(negative)}\n\n"
            "Now, what answer candidates do we have? Present them without reasons."
        )
    return (
        f"- Affirmative: {robust.answer_with_reason(affirmative)}\n"
        f"- Negative: {robust.answer_with_reason(negative)}\n\n"
        "List the answer candidates, one per line, without reasons."
    )


def judge_final(style: str, question: str) -> str:
    """Extractive judge, step 2: the final answer as JSON."""
    if style == "paper":
        return (
            f"Therefore, {question}\nPlease summarize your reasons and give the final answer that you think "
            "is correct. Now please output your answer in json format, with the format as follows: "
            '{"Reason": "", "debate_answer": ""}. Please strictly output in JSON format, do not '
            "output irrelevant content."
        )
    return (
        f"Question: {question}\nWhich candidate is correct? Reply with JSON only: "
        '{"reason": "one sentence", "debate_answer": "the short answer"}'
    )


def conversation(system: str, turns: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    """A system prompt and alternating (user, assistant) turns; an empty assistant ends the list."""
    msgs: list[ChatMessage] = [{"role": "system", "content": system}]
    for user, assistant in turns:
        msgs.append({"role": "user", "content": user})
        if assistant:
            msgs.append({"role": "assistant", "content": assistant})
    return msgs

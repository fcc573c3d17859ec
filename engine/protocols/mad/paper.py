"""``mad`` in the paper style: Liang et al.'s prompts and the released configuration's verdicts."""

from __future__ import annotations

from collections.abc import Sequence

from engine.prompts.paper import render_knowledge, truncate
from engine.protocols.mad.prompts import TIT_FOR_TAT, ordinal, with_knowledge
from services.knowledge import KnowledgeItem

# The paper's debaters answer in free text; its verdicts are JSON asked for in the prompt, sent as
# free text.
ANSWER_SCHEMA = None
VERDICT_SCHEMA = None
FINAL_SCHEMA = None


def debater_system(question: str, level: int, side: str) -> str:
    side_prompt = (
        "You are affirmative side. Please express your viewpoints."
        if side == "affirmative"
        else "You are negative side. You disagree with the affirmative side's points. Provide your reasons "
        "and answer."
    )
    return (
        "You are a debater. Hello and welcome to the debate competition. "
        f"{TIT_FOR_TAT[level]} The debate topic is stated as follows: {question}\n\n{side_prompt}"
    )


def opening(question: str, knowledge: Sequence[KnowledgeItem]) -> str:
    return with_knowledge(render_knowledge, question, knowledge)


def rebut_first(affirmative: str, knowledge: Sequence[KnowledgeItem]) -> str:
    text = f"{affirmative}\n\nYou disagree with my answer. Provide your answer and reasons."
    return with_knowledge(render_knowledge, text, knowledge)


def respond(opponent: str, knowledge: Sequence[KnowledgeItem]) -> str:
    text = f"{opponent}\n\nDo you agree with my perspective? Please provide your reasons and answer."
    return with_knowledge(render_knowledge, text, knowledge)


def moderator_system(question: str) -> str:
    return (
        "You are a moderator. There will be two debaters involved in a debate competition. They will "
        f"present their answers and discuss their perspectives on the {question}. At the end of each "
        "round, you will evaluate both sides' answers and decide which one is correct."
    )


def moderator(round: int, affirmative: str, negative: str) -> str:
    return (
        f"Now the {ordinal(round)} round of debate for both sides has ended.\n\n"
        f"Affirmative side arguing:\n{truncate(affirmative)}\n\n"
        f"Negative side arguing: {truncate(negative)}\n\n"
        "You, as the moderator, will evaluate both sides' answers and determine if there is a clear "
        "preference for an answer candidate. If so, please summarize your reasons for supporting "
        "affirmative/negative side and give the final answer that you think is correct, and the "
        "debate will conclude. If not, the debate will continue to the next round. Now please output "
        'your answer in json format, with the format as follows: {"Whether there is a preference": '
        '"Yes or No", "Supported Side": "Affirmative or Negative", "Reason": "", '
        '"debate_answer": ""}. Please strictly output in JSON format, do not output irrelevant '
        "content."
    )


def judge_candidates(affirmative: str, negative: str) -> str:
    return (
        f"Affirmative side arguing: {truncate(affirmative)}\n\n"
        f"Negative side arguing: {truncate(negative)}\n\n"
        "Now, what answer candidates do we have? Present them without reasons."
    )


def judge_final(question: str) -> str:
    return (
        f"Therefore, {question}\nPlease summarize your reasons and give the final answer that you think "
        "is correct. Now please output your answer in json format, with the format as follows: "
        '{"Reason": "", "debate_answer": ""}. Please strictly output in JSON format, do not '
        "output irrelevant content."
    )

"""MADKE's prompts exactly as published (Prompts 3.1-3.5 and the Appendix A role definitions).

Where the paper leaves a slot unspecified ({example}, {examples}, how knowledge is listed) the choices
are the plainest ones consistent with it, and the knowledge list and role prompt come first so the
prompts of different agents share their longest possible prefix (the server's KV cache reuses it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from debate_worker.engine.parsing import (
    ParsedAnswer,
    ParsedSelection,
    ParsedVerdict,
    parse_bracket_answer,
    parse_selection,
    parse_verdict,
)
from debate_worker.engine.prompts.compose import join_blocks, system_user
from debate_worker.engine.prompts.untrusted import knowledge_block
from services.knowledge import KnowledgeItem
from services.llm import ChatMessage

STYLE = "paper"

DEBATER_ROLE = (
    "You are an intelligent, diplomatic, and assertive debate agent. Your task is to engage in "
    "intellectual debates with other agents, striving to reach a consensus on various topics. It's "
    "crucial to maintain your stance when you are confident about the correctness of your opinion. "
    "However, if you identify an error in your argument, you should promptly acknowledge it and amend "
    "your stance with the correct information. Your ultimate goal is to contribute to an informed, "
    "balanced, and accurate discussion."
)
JUDGE_ROLE = (
    "As a judge agent, your primary responsibility is to impartially evaluate the responses of other "
    "agents for consistency. Please ensure your judgments are objective, relying solely on the "
    "coherence and alignment of the provided answers."
)
SUMMARIZER_ROLE = (
    "You are an intelligent summarizer agent, tasked with synthesizing the responses of other agents "
    "into a concise and comprehensive final answer. Your role is not to generate original responses, "
    "but to condense the information provided by other agents into a succinct summary."
)

# The one-shot example of Prompt 3.2 and the standard-prompting baseline (the paper does not print it).
EXAMPLE = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\n"
    "Answer: Let's think step by step! The first recorded pedestrian killed by a motor car in Britain "
    "was Bridget Driscoll, in London in 1896. Therefore, the answer is [Bridget Driscoll]."
)
STANDARD_EXAMPLE = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\nAnswer: [Bridget Driscoll]"
)
SUMMARY_EXAMPLES = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\n"
    "Agent 1: ... Therefore, the answer is [Bridget Driscoll].\n"
    "Agent 2: ... the first pedestrian killed was [Bridget Driscoll] in 1896.\n"
    "Answer: Both agents say Bridget Driscoll. The final answer is [Bridget Driscoll].\n\n"
    "Question: What is the capital city of Australia?\n"
    "Agent 1: ... Therefore, the answer is [Canberra].\n"
    "Agent 2: ... the answer is [Sydney].\n"
    "Answer: Canberra is the capital; Sydney is the largest city. The final answer is [Canberra]."
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


def simultaneous(question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]:
    """Prompt 3.2: the first round, each debater alone with the knowledge it chose."""
    instruction = (
        "Answer the question as accurately as possible based on the information given, and put the "
        "answer in the form [answer]. Here is an example:\n" + EXAMPLE + "\n(END OF EXAMPLE)"
    )
    return system_user(
        DEBATER_ROLE, join_blocks(instruction, render_knowledge(knowledge), f"Question: {question}\n{STEP}")
    )


def orderly(
    question: str, knowledge: Sequence[KnowledgeItem], others: Sequence[str], own_history: Sequence[str]
) -> list[ChatMessage]:
    """Prompt 3.3: later rounds, with the other agents' previous answers and the agent's own history."""
    instruction = (
        "There are a few other agents assigned the same task, it's your responsibility to discuss with "
        "them and think critically. You can update your answer with other agents' answers or given "
        "knowledges as advice, or you can not update your answer. Please put the answer in the form "
        "[answer]."
    )
    other_block = "Answers from other agents:\n" + "\n".join(f"Agent answer: {truncate(a)}" for a in others)
    own_block = "Your historical answers:\n" + "\n".join(
        f"Round {i}: {truncate(a)}" for i, a in enumerate(own_history, start=1)
    )
    return system_user(
        DEBATER_ROLE,
        join_blocks(
            instruction, render_knowledge(knowledge), other_block, own_block, f"Question: {question}\n{STEP}"
        ),
    )


def judge(question: str, responses: Sequence[str]) -> list[ChatMessage]:
    """Prompt 3.4: the judge's [Yes]/[No] on whether the agents agree."""
    instruction = (
        "The answer of the agents are typically denoted with the [answer] format. Your task is to "
        "extract each agent's answer and evaluate the consistency of their answers to the question. If "
        "all agents have provided correct and consistent answers, respond with [Yes]. If their answers "
        "are inconsistent, respond with [No]. Please ensure to encase your response - Yes or No - within "
        "square brackets."
    )
    return system_user(
        JUDGE_ROLE,
        join_blocks(
            instruction, f"Question: {question}", "Agent Responses: " + render_responses(responses), STEP
        ),
    )


def summary(question: str, responses: Sequence[str]) -> list[ChatMessage]:
    """Prompt 3.5: the summarizer's final answer from all agents' last responses."""
    instruction = (
        "Please summarize the final answer from answer of all agents. Place the final answer of question "
        "in the form of [answer]. Here is some examples:\n" + SUMMARY_EXAMPLES + "\n(END OF EXAMPLE)"
    )
    return system_user(
        SUMMARIZER_ROLE, join_blocks(instruction, f"Question: {question}", render_responses(responses), STEP)
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


def render_responses(responses: Sequence[str]) -> str:
    return "\n".join(f"Agent {i}: {truncate(r)}" for i, r in enumerate(responses, start=1))


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
SUMMARIZE_AGREEMENT = True  # Algorithm 1 always ends with the summarizer (Prompt 3.5)
SELECT_SCHEMA = None
JUDGE_SCHEMA = None

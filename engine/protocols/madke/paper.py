"""MADKE's debate prompts in the paper style, exactly as published (Prompts 3.2-3.5, Appendix A).

The knowledge selection prompt (Prompt 3.1), the answer form and the parsers are the paper style's
shared vocabulary (``engine.prompts.paper``): every protocol with knowledge selects it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.prompts.compose import join_blocks, system_user

# Re-exported (``X as X``): part of this protocol's prompt interface.
from engine.prompts.paper import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.prompts.paper import (
    DEBATER_ROLE,
    EXAMPLE,
    STEP,
    render_knowledge,
    truncate,
)
from engine.prompts.paper import parse_answer as parse_answer
from engine.prompts.paper import parse_judge as parse_judge
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

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
SUMMARIZE_AGREEMENT = True  # Algorithm 1 always ends with the summarizer (Prompt 3.5)
JUDGE_SCHEMA = None  # the paper asks for free text everywhere


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


def render_responses(responses: Sequence[str]) -> str:
    return "\n".join(f"Agent {i}: {truncate(r)}" for i, r in enumerate(responses, start=1))

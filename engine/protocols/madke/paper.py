"""MADKE's debate prompts in the paper style, exactly as published (Prompts 3.2-3.5, Appendix A).

The knowledge selection prompt (Prompt 3.1), the answer form and the parsers are the paper style's
shared vocabulary (``engine.prompts.paper``): every protocol with knowledge selects it the same way.
"""

from __future__ import annotations

from engine.prompts import paper
from engine.protocols.madke.prompts import MadkePrompts

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
QUESTION_STEP = "Question: $question\n" + paper.STEP

PAPER = MadkePrompts(
    ANSWER_SCHEMA=paper.ANSWER_SCHEMA,
    JUDGE_SCHEMA=None,  # the paper asks for free text everywhere
    SUMMARIZE_AGREEMENT=True,  # Algorithm 1 always ends with the summarizer (Prompt 3.5)
    debater_role=paper.DEBATER_ROLE,
    judge_role=JUDGE_ROLE,
    summarizer_role=SUMMARIZER_ROLE,
    simultaneous_blocks=(
        "Answer the question as accurately as possible based on the information given, and put the "
        "answer in the form [answer]. Here is an example:\n" + paper.EXAMPLE + "\n(END OF EXAMPLE)",
        "$knowledge",
        QUESTION_STEP,
    ),
    orderly_blocks=(
        "There are a few other agents assigned the same task, it's your responsibility to discuss with "
        "them and think critically. You can update your answer with other agents' answers or given "
        "knowledges as advice, or you can not update your answer. Please put the answer in the form "
        "[answer].",
        "$knowledge",
        "$others",
        "$own",
        QUESTION_STEP,
    ),
    judge_blocks=(
        "The answer of the agents are typically denoted with the [answer] format. Your task is to "
        "extract each agent's answer and evaluate the consistency of their answers to the question. If "
        "all agents have provided correct and consistent answers, respond with [Yes]. If their answers "
        "are inconsistent, respond with [No]. Please ensure to encase your response - Yes or No - within "
        "square brackets.",
        "Question: $question",
        "Agent Responses: $responses",
        paper.STEP,
    ),
    summary_blocks=(
        "Please summarize the final answer from answer of all agents. Place the final answer of question "
        "in the form of [answer]. Here is some examples:\n" + SUMMARY_EXAMPLES + "\n(END OF EXAMPLE)",
        "Question: $question",
        "$responses",
        paper.STEP,
    ),
    others_heading="Answers from other agents:\n",
    other_line="Agent answer: $answer",
    own_heading="Your historical answers:\n",
    own_line="Round $i: $answer",
    own_last_only=False,
    response_line="Agent $i: $answer",
    quote=paper.truncate,
    judge_quote=paper.truncate,
    render_knowledge=paper.render_knowledge,
    parse_answer=paper.parse_answer,
    parse_judge=paper.parse_judge,
)

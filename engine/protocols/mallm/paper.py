"""``mallm`` in the paper style: Appendix E prompts verbatim, MALLM's "Simple" discussion turns."""

from __future__ import annotations

import functools

from engine.prompts import paper
from engine.protocols.mallm.prompts import TASK, MallmPrompts

FORM = "Put the solution in the form [answer]."

# The paper's turns, extractions and ballots are free text (a ballot: a number, numbers, a ranking or
# a JSON dictionary).
PAPER = MallmPrompts(
    VOTE_SCHEMAS=dict.fromkeys(("simple", "approval", "ranked", "cumulative")),
    ANSWER_SCHEMA=None,
    AGREEMENT_SCHEMA=None,
    system_template="Your role: $persona",
    discussion_blocks=(
        f"Task: {TASK}\nInput: $question",
        "$knowledge",
        "$history",
        "$current",
        "$ask",
    ),
    history_heading="Solutions:\n",
    agreement_history_heading="Here is the discussion so far:\n",
    history_line="$who: $answer",
    current_template="Current solution: $solution",
    asks={
        "agreement": "Improve the current solution. If you agree with the current solution, start your "
        "answer with [AGREE] and explain why; otherwise start with [DISAGREE], explain why and propose "
        "an improved solution. " + FORM,
        "improve": "Here are the other participants' solutions from the previous turn. Improve your own "
        "solution. " + FORM,
        "propose": "Propose a solution. " + FORM,
    },
    answer_instruction="",
    agreement_instruction="",
    extraction_blocks=(
        "You are tasked with creating a final solution based on the given input and your previous "
        f"response. Task: {TASK}\nInput: $question\nYour previous response: $previous\n"
        "Extract the final solution to the task from the provided text. Remove statements of agreement, "
        "disagreement, and explanations. Do not modify the text. Do not output any text besides the "
        "solution. If there is no solution provided, just copy the previous response.",
    ),
    vote_blocks=(
        f"$head Task: {TASK}\nQuestion: $question\nHere are the possible solutions:\n$solutions\n$tail",
    ),
    vote_heads={
        "simple": "You are tasked with voting for the best solution from the list provided below based "
        "on the given task.",
        "approval": "You are tasked with approving any number of solutions from the list provided below "
        "based on the given task.",
        "cumulative": "You are tasked with distributing $points points among the provided solutions "
        "based on the given task.",
        "ranked": "You are tasked with ranking the solutions from the most preferred to the least "
        "preferred based on the given task.",
    },
    vote_tails={
        "simple": "Based on the above solutions, please provide the number of the solution you are "
        "voting for. Answer only with the number.",
        "approval": "Based on the above solutions, please provide the numbers of the solutions you are "
        "approving, separated by commas. Answer only with the numbers.",
        "cumulative": "Based on the above solutions, please distribute $points points among the "
        "solutions. Provide your points allocation as a JSON dictionary where keys are solution numbers "
        "(as int) and values are the points. The total points should sum up to $points. Answer only "
        "with the JSON dictionary.",
        "ranked": "Based on the above solutions, please provide the rankings of the solutions "
        "separated by spaces. Example: '$a $b $c' if you prefer Solution $a the most, then Solution $b, "
        "and finally Solution $c. Provide up to 5 rankings. Only answer with the rankings.",
    },
    quote=functools.partial(paper.truncate, limit=800),
    extraction_quote=paper.truncate,
    render_knowledge=paper.render_knowledge,
)

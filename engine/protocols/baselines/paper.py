"""Single-agent baselines in the paper style (MADKE paper §4.2)."""

from __future__ import annotations

from engine.prompts import paper
from engine.protocols.baselines.prompts import BaselinePrompts
from engine.protocols.madke.paper import PAPER as MADKE_PAPER

STANDARD_EXAMPLE = (
    "Question: Who was the first pedestrian to be killed by a car in Britain?\nAnswer: [Bridget Driscoll]"
)
INSTRUCTION = "Answer the question and put the answer in the form [answer]. Here is an example:\n"

PAPER = BaselinePrompts(
    ANSWER_SCHEMA=paper.ANSWER_SCHEMA,
    system=None,
    standard_blocks=(INSTRUCTION + STANDARD_EXAMPLE + "\n(END OF EXAMPLE)", "Question: $question\nAnswer:"),
    chain_of_thought_blocks=(
        INSTRUCTION + paper.EXAMPLE + "\n(END OF EXAMPLE)",
        "Question: $question\n" + paper.STEP,
    ),
    with_knowledge=MADKE_PAPER.simultaneous,
    parse_answer=paper.parse_answer,
)

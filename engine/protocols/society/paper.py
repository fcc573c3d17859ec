"""``society`` in the paper style: Du et al.'s prompts, multi-turn (see ``prompts.py``)."""

from __future__ import annotations

from engine.prompts import paper
from engine.protocols.common import CONFIDENCE_INSTRUCTION
from engine.protocols.society.prompts import SocietyPrompts

PAPER = SocietyPrompts(
    ANSWER_SCHEMA=paper.ANSWER_SCHEMA,
    # The confidence is a line of the free-text reply ("Confidence: N").
    CONFIDENCE_SCHEMA=None,
    role="",  # no system message but the agent's persona
    persona_template="$persona",
    first_blocks=(
        "$knowledge",
        "Can you answer the following question as accurately as possible? $question Explain your "
        "answer, putting the answer in the form [answer] at the end of your response.",
        "$instruction",
    ),
    update_blocks=(
        "$knowledge",
        "These are the solutions to the problem from other agents: $others",
        "Using the reasoning from other agents as additional advice, can you give an updated answer? "
        "Examine your solution and that other agents step by step. Put your answer in the form [answer] "
        "at the end of your response.",
        "$instruction",
    ),
    view_line="\n\n One agent solution$note: ```$answer```",
    view_separator="",
    answer_instruction="",
    confidence_instruction=CONFIDENCE_INSTRUCTION + ".",
    replay_history=True,
    quote=paper.truncate,
    render_knowledge=paper.render_knowledge,
)

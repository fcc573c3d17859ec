"""Single-agent baselines in Parley's robust style: the format example, then the question."""

from __future__ import annotations

from engine.prompts import robust
from engine.protocols.baselines.prompts import BaselinePrompts
from engine.protocols.madke.robust import ROBUST as MADKE_ROBUST

ROBUST = BaselinePrompts(
    ANSWER_SCHEMA=robust.ANSWER_SCHEMA,
    system=robust.DEBATER_ROLE,
    standard_blocks=(robust.EXAMPLE, "Question: $question", "Answer directly. " + robust.ANSWER_INSTRUCTION),
    chain_of_thought_blocks=(
        robust.EXAMPLE,
        "Question: $question",
        "Let's think step by step. " + robust.ANSWER_INSTRUCTION,
    ),
    with_knowledge=MADKE_ROBUST.simultaneous,
    parse_answer=robust.parse_answer,
)

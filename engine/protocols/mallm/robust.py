"""``mallm`` in the robust style: the same flow in ``prompts/robust.py`` conventions, JSON turns and votes."""

from __future__ import annotations

import functools
from typing import Any

from engine.prompts import paper, robust
from engine.protocols.mallm.prompts import MallmPrompts


def _json_only(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A ballot's schema: one required field, nothing else."""
    return {"type": "object", "properties": {name: schema}, "required": [name], "additionalProperties": False}


NUMBERS: dict[str, Any] = {"type": "array", "items": {"type": "integer"}}

ROBUST = MallmPrompts(
    VOTE_SCHEMAS={
        "simple": _json_only("vote", {"type": "integer"}),
        "approval": _json_only("approved", NUMBERS),
        "ranked": _json_only("ranking", NUMBERS),
        "cumulative": _json_only("points", {"type": "object", "additionalProperties": {"type": "integer"}}),
    },
    ANSWER_SCHEMA=robust.ANSWER_SCHEMA,
    # A turn after the first of the memory and drafting paradigms also says whether it agrees with the
    # current solution: a JSON boolean the agreement parser reads, so the [AGREE] tag of the paper's
    # wording is not needed beside the JSON answer.
    AGREEMENT_SCHEMA=robust.answer_schema_with("agree", {"type": "boolean"}, first=True),
    system_template=robust.DEBATER_ROLE + " Your role: $persona.",
    discussion_blocks=(
        robust.EXAMPLE,
        "$knowledge",
        "$history",
        "$current",
        "Question: $question",
        "$ask",
        "$instruction",
    ),
    history_heading="Discussion so far:\n",
    agreement_history_heading="Discussion so far:\n",
    history_line="- $who: $answer",
    current_template="Current solution: [$solution]",
    asks={
        "agreement": "Say whether the current solution is right, and give your own answer either way.",
        "improve": "Improve your own answer using the other participants' answers as advice.",
        "propose": "Answer on your own.",
    },
    answer_instruction=robust.ANSWER_INSTRUCTION,
    agreement_instruction=(
        'Reply with JSON only: {"agree": true or false, "reason": "...", "answer": "..."}\n'
        "agree: true if the current solution is right. " + robust.ANSWER_RULES
    ),
    extraction_blocks=(
        "Question: $question",
        "Your previous response: $previous",
        "Give the solution from your previous response without agreement statements or explanations.",
        robust.ANSWER_INSTRUCTION,
    ),
    vote_blocks=("Question: $question", "Possible solutions:\n$solutions", "$tail"),
    vote_heads={},
    vote_tails={
        "simple": 'Vote for the best solution. Reply with JSON only: {"vote": <solution number>}',
        "approval": "Approve every solution you think is correct (at least one). Reply with JSON only: "
        '{"approved": [<solution numbers>]}',
        "cumulative": "Distribute $points points among the solutions, more points to better ones, "
        '$points in total. Reply with JSON only: {"points": {"<solution number>": <points>, ...}}',
        "ranked": "Rank the solutions from best to worst. Reply with JSON only: "
        '{"ranking": [<best solution number>, ..., <worst>]}',
    },
    quote=robust.answer_with_reason,
    extraction_quote=functools.partial(paper.truncate, limit=800),
    render_knowledge=robust.render_knowledge,
)

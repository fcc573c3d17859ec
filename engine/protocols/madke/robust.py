"""MADKE's debate prompts in Parley's robust style (see ``engine.prompts.robust`` for what it changes).

The judge sees the debaters' extracted short answers, not their whole replies; a unanimous final
answer is taken as it is, and the summarizer only chooses between differing answers.
"""

from __future__ import annotations

from engine.prompts import robust
from engine.protocols.madke.prompts import MadkePrompts


def short_answer_or_none(reply: str) -> str:
    """A debater's short answer as the judge is shown it."""
    return robust.short_answer(reply) or "(no answer)"


ROBUST = MadkePrompts(
    ANSWER_SCHEMA=robust.ANSWER_SCHEMA,
    JUDGE_SCHEMA={
        "type": "object",
        "properties": {"consensus": {"type": "boolean"}},
        "required": ["consensus"],
        "additionalProperties": False,
    },
    # A unanimous final answer is the answer; the summarizer is asked only when the debaters differ.
    SUMMARIZE_AGREEMENT=False,
    debater_role=robust.DEBATER_ROLE,
    judge_role="You check whether several short answers say the same thing.",
    summarizer_role="You pick the final answer that the debaters' answers and reasons best support.",
    simultaneous_blocks=(robust.EXAMPLE, "$knowledge", "Question: $question", robust.ANSWER_INSTRUCTION),
    # What stays the same from round to round comes first (the example, the chosen items, the
    # question: round 1's whole prompt but its last line), so the agent's server slot re-reads only
    # the other answers and the instructions.
    orderly_blocks=(
        robust.EXAMPLE,
        "$knowledge",
        "Question: $question",
        "$others",
        "$own",
        "Check the knowledge and the other answers. Keep your answer if the evidence supports it; "
        "change it if another answer is better supported.",
        robust.ANSWER_INSTRUCTION,
    ),
    judge_blocks=(
        "Question: $question",
        "Short answers:\n$responses",
        "Do all debaters give the same answer (the same person, place, date, number or thing, even if "
        'worded differently)? Reply with JSON only: {"consensus": true} or {"consensus": false}.',
    ),
    summary_blocks=(
        "Question: $question",
        "Debaters' final answers:\n$responses",
        "Give the answer the debaters agree on, or the best supported one if they differ. Do not add "
        "new facts.",
        robust.ANSWER_INSTRUCTION,
    ),
    others_heading="Other debaters' answers:\n",
    other_line="- Debater $i: $answer",
    own_heading="",
    own_line="Your previous answer: $answer",
    own_last_only=True,
    response_line="- Debater $i: $answer",
    quote=robust.answer_with_reason,
    judge_quote=short_answer_or_none,
    render_knowledge=robust.render_knowledge,
    parse_answer=robust.parse_answer,
    parse_judge=robust.parse_judge,
)

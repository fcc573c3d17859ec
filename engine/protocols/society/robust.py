"""``society`` in the robust style: one user message, others quoted by short answer and reason."""

from __future__ import annotations

from engine.prompts import robust
from engine.protocols.society.prompts import SocietyPrompts

ROBUST = SocietyPrompts(
    ANSWER_SCHEMA=robust.ANSWER_SCHEMA,
    # With confidence on, the answer's JSON carries it too, so the reply is still one schema-checked object.
    CONFIDENCE_SCHEMA=robust.answer_schema_with("confidence", {"type": "integer"}),
    role=robust.DEBATER_ROLE,
    persona_template=" Your role: $persona.",
    first_blocks=(robust.EXAMPLE, "$knowledge", "Question: $question", "$instruction"),
    update_blocks=(
        robust.EXAMPLE,
        "$knowledge",
        "Other agents' answers:\n$others",
        "Your previous answer: $own",
        "Question: $question",
        "Use the other answers as advice. Keep your answer if the evidence supports it; change it if "
        "another answer is better supported.",
        "$instruction",
    ),
    view_line="- Agent $i: $answer$note",
    view_separator="\n",
    answer_instruction=robust.ANSWER_INSTRUCTION,
    confidence_instruction=(
        'Reply with JSON only: {"reason": "...", "answer": "...", "confidence": N}\n'
        + robust.ANSWER_RULES
        + " confidence: how sure you are of your answer, from 1 to 10."
    ),
    replay_history=False,
    quote=robust.answer_with_reason,
    render_knowledge=robust.render_knowledge,
)

"""``society`` in the robust style: one user message, others quoted by short answer and reason."""

from __future__ import annotations

from collections.abc import Sequence

from engine.prompts import robust
from engine.prompts.compose import join_blocks, system_user
from engine.prompts.robust import ANSWER_SCHEMA as ANSWER_SCHEMA
from engine.protocols.society.prompts import View, confidence_note
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

# With confidence on, the answer's JSON carries it too, so the reply is still one schema-checked object.
CONFIDENCE_SCHEMA = robust.answer_schema_with("confidence", {"type": "integer"})
CONFIDENCE_INSTRUCTION = (
    'Reply with JSON only: {"reason": "...", "answer": "...", "confidence": N}\n'
    + robust.ANSWER_RULES
    + " confidence: how sure you are of your answer, from 1 to 10."
)


def messages(
    question: str,
    knowledge: Sequence[KnowledgeItem],
    others_by_round: Sequence[Sequence[View]],
    own_history: Sequence[str],
    *,
    confidence: bool,
    persona: str | None = None,
) -> list[ChatMessage]:
    system = robust.DEBATER_ROLE + (f" Your role: {persona}." if persona else "")
    instruction = CONFIDENCE_INSTRUCTION if confidence else robust.ANSWER_INSTRUCTION
    if not own_history:
        return system_user(
            system,
            join_blocks(
                robust.EXAMPLE, robust.render_knowledge(knowledge), f"Question: {question}", instruction
            ),
        )
    views = others_by_round[len(own_history) - 1]
    other_block = "Other agents' answers:\n" + "\n".join(
        f"- Agent {i}: {robust.answer_with_reason(v.text)}{confidence_note(v, confidence)}"
        for i, v in enumerate(views, start=1)
    )
    own = f"Your previous answer: {robust.answer_with_reason(own_history[-1])}"
    guidance = (
        "Use the other answers as advice. Keep your answer if the evidence supports it; change it if "
        "another answer is better supported."
    )
    return system_user(
        system,
        join_blocks(
            robust.EXAMPLE,
            robust.render_knowledge(knowledge),
            other_block,
            own,
            f"Question: {question}",
            guidance,
            instruction,
        ),
    )

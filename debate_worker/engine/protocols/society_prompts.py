"""Prompts of Du et al. (2023), "society of minds" debate, in Parley's two styles.

Paper style: Du et al.'s prompts for open questions, with their multi-turn structure (the agent's own
earlier replies are assistant turns) and the answer form ``[answer]`` instead of ``(X)``, because the
questions here are open, not multiple choice. Robust style: one user message in the conventions of
``prompts/robust.py``: (K3) knowledge, other agents quoted by their short answer and reason, and one
``Final answer: [...]`` line asked for last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from debate_worker.engine.prompts import paper, robust
from debate_worker.engine.prompts.compose import join_blocks, system_user
from debate_worker.engine.protocols.common import CONFIDENCE_INSTRUCTION
from services.knowledge import KnowledgeItem
from services.llm import ChatMessage


@dataclass(frozen=True)
class View:
    """Another agent's answer as one agent sees it."""

    text: str
    confidence: int | None = None


def _conf(view: View, show: bool) -> str:
    return f" (confidence {view.confidence}/10)" if show and view.confidence is not None else ""


def paper_first(question: str, knowledge: Sequence[KnowledgeItem], confidence: bool) -> str:
    parts = [
        paper.render_knowledge(knowledge),
        f"Can you answer the following question as accurately as possible? {question} Explain your "
        "answer, putting the answer in the form [answer] at the end of your response.",
    ]
    if confidence:
        parts.append(CONFIDENCE_INSTRUCTION + ".")
    return join_blocks(*parts)


def paper_update(
    question: str, knowledge: Sequence[KnowledgeItem], others: Sequence[View], confidence: bool
) -> str:
    blocks = "".join(
        f"\n\n One agent solution{_conf(v, confidence)}: ```{paper.truncate(v.text)}```" for v in others
    )
    parts = [
        paper.render_knowledge(knowledge),
        "These are the solutions to the problem from other agents: " + blocks,
        "Using the reasoning from other agents as additional advice, can you give an updated answer? "
        "Examine your solution and that other agents step by step. Put your answer in the form [answer] "
        "at the end of your response.",
    ]
    if confidence:
        parts.append(CONFIDENCE_INSTRUCTION + ".")
    return join_blocks(*parts)


def messages(
    style: str,
    question: str,
    knowledge: Sequence[KnowledgeItem],
    others_by_round: Sequence[Sequence[View]],
    own_history: Sequence[str],
    *,
    confidence: bool,
    persona: str | None = None,
) -> list[ChatMessage]:
    """The prompt for one agent in round ``len(own_history) + 1``.

    ``others_by_round[k]`` are the views shown before round k+2 (already in the configured order).
    """
    if style == "paper":
        msgs: list[ChatMessage] = []
        if persona:
            msgs.append({"role": "system", "content": persona})
        # Only the current round carries knowledge, so old rounds do not repeat the pool text.
        msgs.append(
            {
                "role": "user",
                "content": paper_first(question, knowledge if not own_history else (), confidence),
            }
        )
        for r, own in enumerate(own_history):
            msgs.append({"role": "assistant", "content": paper.truncate(own)})
            last = r == len(own_history) - 1
            msgs.append(
                {
                    "role": "user",
                    "content": paper_update(
                        question, knowledge if last else (), others_by_round[r], confidence
                    ),
                }
            )
        return msgs
    system = robust.DEBATER_ROLE + (f" Your role: {persona}." if persona else "")
    instruction = robust.ANSWER_INSTRUCTION
    if confidence:
        instruction += '\nAlso add how confident you are in your answer, from 1 to 10, as "confidence": N.'
    if not own_history:
        return system_user(
            system,
            join_blocks(
                robust.EXAMPLE, robust.render_knowledge(knowledge), f"Question: {question}", instruction
            ),
        )
    views = others_by_round[len(own_history) - 1]
    other_block = "Other agents' answers:\n" + "\n".join(
        f"- Agent {i}: {robust.answer_with_reason(v.text)}{_conf(v, confidence)}"
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

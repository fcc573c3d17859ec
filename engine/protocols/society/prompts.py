"""``society``'s prompts, written once over the texts its styles differ in, and what both share.

Paper style (``paper.py``): Du et al.'s prompts for open questions, with their multi-turn structure
(the agent's own earlier replies are assistant turns) and the answer form ``[answer]`` instead of
``(X)``, because the questions here are open, not multiple choice. Robust style (``robust.py``): one
user message in the conventions of ``prompts/robust.py``: (K3) knowledge, other agents quoted by their
short answer and reason, and the answer asked for last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.prompts.compose import fill, fill_blocks
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


@dataclass(frozen=True)
class View:
    """Another agent's answer as one agent sees it."""

    text: str
    confidence: int | None = None


def confidence_note(view: View, show: bool) -> str:
    return f" (confidence {view.confidence}/10)" if show and view.confidence is not None else ""


@dataclass(frozen=True)
class SocietyPrompts:
    """One style of ``society``'s prompts: block templates, how views are shown, the conversation shape.

    The first round's blocks (``first_blocks``) and a later round's (``update_blocks``) have the slots
    ``$knowledge``, ``$question``, ``$others`` (the views, each a ``view_line`` with ``$i``, ``$answer``
    and ``$note``, joined by ``view_separator``), ``$own`` (the agent's previous answer) and
    ``$instruction`` (``answer_instruction``, or ``confidence_instruction`` with confidence on).
    ``replay_history``: the earlier rounds are replayed as user turns (without knowledge), each
    followed by the agent's own reply as an assistant turn; else only the current round is asked.
    """

    # An answer's JSON schema, and the same with the stated confidence (None: free text).
    ANSWER_SCHEMA: dict[str, Any] | None
    CONFIDENCE_SCHEMA: dict[str, Any] | None
    role: str
    persona_template: str  # $persona, after the role
    first_blocks: tuple[str, ...]
    update_blocks: tuple[str, ...]
    view_line: str
    view_separator: str
    answer_instruction: str
    confidence_instruction: str
    replay_history: bool
    quote: Callable[[str], str]
    render_knowledge: Callable[[Sequence[KnowledgeItem]], str]

    def messages(
        self,
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
        system = self.role + (fill(self.persona_template, persona=persona) if persona else "")
        msgs: list[ChatMessage] = [{"role": "system", "content": system}] if system else []
        instruction = self.confidence_instruction if confidence else self.answer_instruction

        def user_turn(knowledge: Sequence[KnowledgeItem], history: Sequence[str]) -> ChatMessage:
            """The user message of round ``len(history) + 1``."""
            if not history:
                text = fill_blocks(
                    self.first_blocks,
                    question=question,
                    knowledge=self.render_knowledge(knowledge),
                    instruction=instruction,
                )
                return {"role": "user", "content": text}
            views = others_by_round[len(history) - 1]
            others = self.view_separator.join(
                fill(self.view_line, i=i, answer=self.quote(v.text), note=confidence_note(v, confidence))
                for i, v in enumerate(views, start=1)
            )
            text = fill_blocks(
                self.update_blocks,
                question=question,
                knowledge=self.render_knowledge(knowledge),
                others=others,
                own=self.quote(history[-1]),
                instruction=instruction,
            )
            return {"role": "user", "content": text}

        if self.replay_history:
            # Only the current round carries knowledge, so old rounds do not repeat the pool text.
            for r, own in enumerate(own_history):
                msgs.append(user_turn((), own_history[:r]))
                msgs.append({"role": "assistant", "content": self.quote(own)})
        msgs.append(user_turn(knowledge, own_history))
        return msgs

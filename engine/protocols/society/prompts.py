"""What ``society`` asks of a prompt style, and what both styles share.

Paper style (``paper.py``): Du et al.'s prompts for open questions, with their multi-turn structure
(the agent's own earlier replies are assistant turns) and the answer form ``[answer]`` instead of
``(X)``, because the questions here are open, not multiple choice. Robust style (``robust.py``): one
user message in the conventions of ``prompts/robust.py``: (K3) knowledge, other agents quoted by their
short answer and reason, and the answer asked for last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


@dataclass(frozen=True)
class View:
    """Another agent's answer as one agent sees it."""

    text: str
    confidence: int | None = None


def confidence_note(view: View, show: bool) -> str:
    return f" (confidence {view.confidence}/10)" if show and view.confidence is not None else ""


class SocietyPrompts(Protocol):
    # An answer's JSON schema, and the same with the stated confidence (None: free text).
    @property
    def ANSWER_SCHEMA(self) -> dict[str, Any] | None: ...
    @property
    def CONFIDENCE_SCHEMA(self) -> dict[str, Any] | None: ...

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
        ...

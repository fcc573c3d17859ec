"""What the single-agent baselines ask of a prompt style (``paper.py``, ``robust.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from engine.parsing import ParsedAnswer
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


class BaselinePrompts(Protocol):
    @property
    def ANSWER_SCHEMA(self) -> dict[str, Any] | None: ...

    def standard(self, question: str) -> list[ChatMessage]: ...
    def chain_of_thought(self, question: str) -> list[ChatMessage]: ...
    def rag(self, question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]: ...
    def parse_answer(self, text: str) -> ParsedAnswer: ...

"""What MADKE asks of a prompt style: one implementation per style (``paper.py``, ``robust.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from engine.parsing import ParsedAnswer, ParsedVerdict
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


class MadkePrompts(Protocol):
    @property
    def ANSWER_SCHEMA(self) -> dict[str, Any] | None: ...
    @property
    def JUDGE_SCHEMA(self) -> dict[str, Any] | None: ...
    # Whether a unanimous final round still goes to the summarizer (the paper's Algorithm 1 always does).
    @property
    def SUMMARIZE_AGREEMENT(self) -> bool: ...

    def simultaneous(self, question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]: ...
    def orderly(
        self,
        question: str,
        knowledge: Sequence[KnowledgeItem],
        others: Sequence[str],
        own_history: Sequence[str],
    ) -> list[ChatMessage]: ...
    def judge(self, question: str, responses: Sequence[str]) -> list[ChatMessage]: ...
    def summary(self, question: str, responses: Sequence[str]) -> list[ChatMessage]: ...
    def parse_answer(self, text: str) -> ParsedAnswer: ...
    def parse_judge(self, text: str) -> ParsedVerdict: ...

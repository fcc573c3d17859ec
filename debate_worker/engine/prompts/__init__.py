"""Prompt styles. Each style is a module with the same functions (see ``PromptSet``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol

from debate_worker.engine.parsing import ParsedAnswer, ParsedSelection, ParsedVerdict
from services.knowledge import KnowledgeItem
from services.llm import ChatMessage


class PromptSet(Protocol):
    STYLE: str
    ANSWER_SCHEMA: dict[str, Any] | None
    SUMMARIZE_AGREEMENT: bool
    KNOWLEDGE_LABEL: re.Pattern[str]  # how an answer that is only a knowledge item's label looks
    SELECT_SCHEMA: dict[str, Any] | None
    JUDGE_SCHEMA: dict[str, Any] | None
    EXAMPLE_ANSWERS: tuple[str, ...]

    def select(
        self, question: str, pool: Sequence[KnowledgeItem], previous_answer: str | None
    ) -> list[ChatMessage]: ...
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
    def standard(self, question: str) -> list[ChatMessage]: ...
    def chain_of_thought(self, question: str) -> list[ChatMessage]: ...
    def rag(self, question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]: ...
    def render_knowledge(self, items: Sequence[KnowledgeItem]) -> str: ...
    def parse_answer(self, text: str) -> ParsedAnswer: ...
    def parse_select(self, text: str, pool_size: int, max_selected: int) -> ParsedSelection: ...
    def parse_judge(self, text: str) -> ParsedVerdict: ...


def get_prompts(style: str) -> PromptSet:
    """The prompt module for ``style`` ("paper" or "robust")."""
    module: ModuleType
    if style == "paper":
        from debate_worker.engine.prompts import paper as module
    elif style == "robust":
        from debate_worker.engine.prompts import robust as module
    else:
        raise ValueError(f"unknown prompt style {style!r}")
    return module

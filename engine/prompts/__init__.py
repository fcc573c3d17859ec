"""Prompt styles' shared vocabulary. Each style is a module with the same names (see ``PromptSet``).

What every protocol of a style shares lives here: the debater role line, the answer form and its
parser, how knowledge items are shown, and the knowledge selection step (MADKE's Prompt 3.1, used by
every protocol that reads a pool). Each protocol's own prompts live in its folder under
``engine/protocols/`` and build on this.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from engine.parsing import ParsedAnswer, ParsedSelection, ParsedVerdict
from engine.prompts import paper, robust
from engine.styles import ByStyle
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


class PromptSet(Protocol):
    """A style's shared vocabulary: what every protocol of the style reads answers and knowledge with."""

    @property
    def STYLE(self) -> str: ...
    @property
    def ANSWER_SCHEMA(self) -> dict[str, Any] | None: ...
    @property
    def SELECT_SCHEMA(self) -> dict[str, Any] | None: ...
    # how an answer that is only a knowledge item's label looks
    @property
    def KNOWLEDGE_LABEL(self) -> re.Pattern[str]: ...
    @property
    def EXAMPLE_ANSWERS(self) -> tuple[str, ...]: ...
    # what ``judge=auto`` means with this style
    @property
    def AUTO_JUDGE(self) -> str: ...

    def select(
        self, question: str, pool: Sequence[KnowledgeItem], previous_answer: str | None
    ) -> list[ChatMessage]: ...
    def render_knowledge(self, items: Sequence[KnowledgeItem]) -> str: ...
    def parse_answer(self, text: str) -> ParsedAnswer: ...
    def parse_select(self, text: str, pool_size: int, max_selected: int) -> ParsedSelection: ...
    def parse_judge(self, text: str) -> ParsedVerdict: ...
    # the passage the pool is searched with (search_query="passage"; engine/search_passage.py)
    def search_passage(self, question: str) -> list[ChatMessage]: ...


get_prompts: ByStyle[PromptSet] = ByStyle(paper=paper, robust=robust)

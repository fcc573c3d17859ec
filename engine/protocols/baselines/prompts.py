"""The single-agent baselines' prompts, written once over the texts their styles differ in.

Each style (``paper.py``, ``robust.py``) is a ``BaselinePrompts`` value: the system message (none in
the paper), the blocks of the standard and chain-of-thought prompts, and the style's answer reader;
``rag`` is MADKE's first-round prompt of the same style with the whole pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.parsing import ParsedAnswer
from engine.prompts.compose import chat, fill_blocks
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


@dataclass(frozen=True)
class BaselinePrompts:
    """One style of the baselines' prompts. Block templates have a ``$question`` slot."""

    ANSWER_SCHEMA: dict[str, Any] | None
    system: str | None
    standard_blocks: tuple[str, ...]
    chain_of_thought_blocks: tuple[str, ...]
    # MADKE's Prompt 3.2 (or its robust form) with the whole pool: the RAG baseline's prompt.
    with_knowledge: Callable[[str, Sequence[KnowledgeItem]], list[ChatMessage]]
    parse_answer: Callable[[str], ParsedAnswer]

    def standard(self, question: str) -> list[ChatMessage]:
        """Standard prompting (Brown et al.): a one-shot demonstration fixes the output format."""
        return chat(self.system, fill_blocks(self.standard_blocks, question=question))

    def chain_of_thought(self, question: str) -> list[ChatMessage]:
        """Zero-shot CoT's magic phrase plus a one-shot CoT demonstration (the paper's CoT baseline)."""
        return chat(self.system, fill_blocks(self.chain_of_thought_blocks, question=question))

    def rag(self, question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]:
        """Retrieval-augmented generation: one agent with the whole pool, Prompt 3.2's wording."""
        return self.with_knowledge(question, knowledge)

"""MADKE's prompts (Prompts 3.2-3.5), written once over the texts its styles differ in.

Each style (``paper.py``, ``robust.py``) is a ``MadkePrompts`` value: the roles, each prompt's blocks
(templates with ``$question``, ``$knowledge``, ``$others``, ``$own`` and ``$responses`` slots; an
empty slot's block is left out), how another agent's reply is quoted, and the style's readers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.parsing import ParsedAnswer, ParsedVerdict
from engine.prompts.compose import fill_blocks, listing, system_user
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem


@dataclass(frozen=True)
class MadkePrompts:
    """One style of MADKE's prompts."""

    ANSWER_SCHEMA: dict[str, Any] | None
    JUDGE_SCHEMA: dict[str, Any] | None
    # Whether a unanimous final round still goes to the summarizer (the paper's Algorithm 1 always does).
    SUMMARIZE_AGREEMENT: bool
    debater_role: str
    judge_role: str
    summarizer_role: str
    simultaneous_blocks: tuple[str, ...]
    orderly_blocks: tuple[str, ...]
    judge_blocks: tuple[str, ...]
    summary_blocks: tuple[str, ...]
    # The other agents' answers (``$others``): a heading, then one line per answer.
    others_heading: str
    other_line: str
    # The agent's own earlier answers (``$own``): every round under a heading, or only the last.
    own_heading: str
    own_line: str
    own_last_only: bool
    # One line per debater's response (``$responses``) for the judge and for the summarizer.
    response_line: str
    quote: Callable[[str], str]
    judge_quote: Callable[[str], str]
    render_knowledge: Callable[[Sequence[KnowledgeItem]], str]
    parse_answer: Callable[[str], ParsedAnswer]
    parse_judge: Callable[[str], ParsedVerdict]

    def simultaneous(self, question: str, knowledge: Sequence[KnowledgeItem]) -> list[ChatMessage]:
        """Prompt 3.2: the first round, each debater alone with the knowledge it chose."""
        user = fill_blocks(
            self.simultaneous_blocks, question=question, knowledge=self.render_knowledge(knowledge)
        )
        return system_user(self.debater_role, user)

    def orderly(
        self,
        question: str,
        knowledge: Sequence[KnowledgeItem],
        others: Sequence[str],
        own_history: Sequence[str],
    ) -> list[ChatMessage]:
        """Prompt 3.3: later rounds, with the other agents' previous answers and the agent's own history."""
        own = own_history[-1:] if self.own_last_only else own_history
        user = fill_blocks(
            self.orderly_blocks,
            question=question,
            knowledge=self.render_knowledge(knowledge),
            others=self.others_heading + listing(self.other_line, others, self.quote),
            own=self.own_heading + listing(self.own_line, own, self.quote) if own or self.own_heading else "",
        )
        return system_user(self.debater_role, user)

    def judge(self, question: str, responses: Sequence[str]) -> list[ChatMessage]:
        """Prompt 3.4: whether the agents agree."""
        shown = listing(self.response_line, responses, self.judge_quote)
        return system_user(
            self.judge_role, fill_blocks(self.judge_blocks, question=question, responses=shown)
        )

    def summary(self, question: str, responses: Sequence[str]) -> list[ChatMessage]:
        """Prompt 3.5: the summarizer's final answer from all agents' last responses."""
        shown = listing(self.response_line, responses, self.quote)
        return system_user(
            self.summarizer_role, fill_blocks(self.summary_blocks, question=question, responses=shown)
        )

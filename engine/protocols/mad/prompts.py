"""What ``mad`` asks of a prompt style, and what both styles share.

Paper style (``paper.py``): the meta prompts of §2 with the "tit for tat" sentence of the chosen level
(Table 11), the affirmative/negative debater prompts, the moderator prompt of §2 and the JSON verdict
and two-step extractive judge of the authors' released configuration
(github.com/Skytliang/Multi-Agents-Debate, ``config4all.json``), which the paper describes but does
not print. Robust style (``robust.py``): the same flow with one-sentence roles, (K3) knowledge, short
answers asked for as JSON and the verdicts as JSON with a schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

# Table 11: level 2 is the sentence of the default meta prompt.
TIT_FOR_TAT = {
    0: "Both sides must reach a full consensus on every point of the debate. Every statement must be "
    "agreed upon by both sides.",
    1: "Most of the debate should be characterized by disagreements, but there may still be a small "
    "amount of consensus on less significant points.",
    2: "It's not necessary to fully agree with each other's perspectives, as our objective is to find "
    "the correct answer.",
    3: "Both sides must disagree with each other on every point of the debate. There should be no "
    "consensus whatsoever.",
}

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def ordinal(r: int) -> str:
    return ORDINALS[r - 1] if 1 <= r <= len(ORDINALS) else f"{r}th"


def with_knowledge(
    render: Callable[[Sequence[KnowledgeItem]], str], text: str, knowledge: Sequence[KnowledgeItem]
) -> str:
    """The agent's chosen knowledge (rendered in its style) ahead of the turn's text."""
    rendered = render(knowledge)
    return f"{rendered}\n\n{text}" if rendered else text


def conversation(system: str, turns: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    """A system prompt and alternating (user, assistant) turns; an empty assistant ends the list."""
    msgs: list[ChatMessage] = [{"role": "system", "content": system}]
    for user, assistant in turns:
        msgs.append({"role": "user", "content": user})
        if assistant:
            msgs.append({"role": "assistant", "content": assistant})
    return msgs


class MadPrompts(Protocol):
    # The debaters' answers, the moderator's verdict and the extractive judge's final answer, as JSON
    # schemas (None: free text).
    @property
    def ANSWER_SCHEMA(self) -> dict[str, Any] | None: ...
    @property
    def VERDICT_SCHEMA(self) -> dict[str, Any] | None: ...
    @property
    def FINAL_SCHEMA(self) -> dict[str, Any] | None: ...

    def debater_system(self, question: str, level: int, side: str) -> str:
        """The meta prompt plus the side's debater prompt (§2)."""
        ...

    def opening(self, question: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """The affirmative's first turn: the topic itself."""
        ...

    def rebut_first(self, affirmative: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """The negative's first turn: the affirmative's answer to disagree with."""
        ...

    def respond(self, opponent: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """Later turns of both sides: the opponent's last argument."""
        ...

    def moderator_system(self, question: str) -> str: ...
    def moderator(self, round: int, affirmative: str, negative: str) -> str: ...
    def judge_candidates(self, affirmative: str, negative: str) -> str:
        """Extractive judge, step 1: the answer candidates."""
        ...

    def judge_final(self, question: str) -> str:
        """Extractive judge, step 2: the final answer as JSON."""
        ...

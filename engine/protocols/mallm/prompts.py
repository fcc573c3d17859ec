"""What ``mallm`` asks of a prompt style, and what both styles share.

Paper style (``paper.py``): the voting prompts of Appendix E.2 (Figs. 16-19) and the final-answer
extraction prompt of E.1 verbatim (persona slots filled from the team spec, or "Participant i"), and
for the discussion turns MALLM's "Simple" response generator as the paper describes it (§3.2, App. C:
neutral prompt, the task repeated every turn, agreement with the previous message stated as
[AGREE]/[DISAGREE]). The ranked prompt's example is rendered with the configured solution numbering
(the paper's example is 0-based while its lists start at 1). Robust style (``robust.py``): the same
flow in ``prompts/robust.py`` conventions, votes as JSON with a schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

TASK = "Answer the question."


def persona_line(persona: str | None, agent: int) -> str:
    return persona or f"Participant {agent + 1} (a knowledgeable member of the discussion)"


def solution_list(solutions: Sequence[str], base: int) -> str:
    return "\n".join(f"Solution {i + base}: {s}" for i, s in enumerate(solutions))


class MallmPrompts(Protocol):
    # The vote's JSON schema for each decision protocol (None: the ballot is free text).
    @property
    def VOTE_SCHEMAS(self) -> Mapping[str, dict[str, Any] | None]: ...

    # A discussion turn's and an extraction's JSON schema; AGREEMENT_SCHEMA is for a turn that also
    # states agreement with the current solution (None: free text).
    @property
    def ANSWER_SCHEMA(self) -> dict[str, Any] | None: ...
    @property
    def AGREEMENT_SCHEMA(self) -> dict[str, Any] | None: ...

    def discussion(
        self,
        question: str,
        knowledge: Sequence[KnowledgeItem],
        history: Sequence[tuple[str, str]],
        current_solution: str | None,
        *,
        persona: str | None,
        agent: int,
        agreement: bool,
    ) -> list[ChatMessage]:
        """One discussion turn. ``history``: (speaker, message) pairs the agent remembers.

        With ``agreement`` (memory/drafting paradigms after the first message) the agent states whether
        it agrees with the previous message; without (drafts, Collective Improvement) it just answers.
        """
        ...

    def extraction(self, question: str, previous: str, persona: str | None, agent: int) -> list[ChatMessage]:
        """E.1: the final solution extracted from the last agent's previous response."""
        ...

    def vote(
        self,
        decision: str,
        question: str,
        solutions: Sequence[str],
        *,
        base: int,
        points: int,
        persona: str | None,
        agent: int,
    ) -> list[ChatMessage]:
        """E.2 (Figs. 16-19): one agent's vote over the numbered solutions."""
        ...

"""``mallm``'s prompts, written once over the texts its styles differ in, and what both styles share.

Paper style (``paper.py``): the voting prompts of Appendix E.2 (Figs. 16-19) and the final-answer
extraction prompt of E.1 verbatim (persona slots filled from the team spec, or "Participant i"), and
for the discussion turns MALLM's "Simple" response generator as the paper describes it (§3.2, App. C:
neutral prompt, the task repeated every turn, agreement with the previous message stated as
[AGREE]/[DISAGREE]). The ranked prompt's example is rendered with the configured solution numbering
(the paper's example is 0-based while its lists start at 1). Robust style (``robust.py``): the same
flow in ``prompts/robust.py`` conventions, votes as JSON with a schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.prompts.compose import fill, fill_blocks, system_user
from services.chat_model import ChatMessage
from services.knowledge import KnowledgeItem

TASK = "Answer the question."


def persona_line(persona: str | None, agent: int) -> str:
    return persona or f"Participant {agent + 1} (a knowledgeable member of the discussion)"


def solution_list(solutions: Sequence[str], base: int) -> str:
    return "\n".join(f"Solution {i + base}: {s}" for i, s in enumerate(solutions))


@dataclass(frozen=True)
class MallmPrompts:
    """One style of ``mallm``'s prompts: templates with ``$`` slots, filled by the methods below.

    ``discussion_blocks`` have ``$question``, ``$knowledge``, ``$history`` (a heading and one
    ``history_line`` per remembered message: ``$who``, ``$answer``), ``$current`` (the current solution
    as ``current_template`` shows it), ``$ask`` (one of ``asks``: ``agreement``, ``improve`` or
    ``propose``) and ``$instruction``; ``vote_blocks`` have ``$head`` and ``$tail`` (by decision: with
    ``$points`` and the ranked example's ``$a``, ``$b``, ``$c``), ``$question`` and ``$solutions``.
    """

    # The vote's JSON schema for each decision protocol (None: the ballot is free text).
    VOTE_SCHEMAS: Mapping[str, dict[str, Any] | None]
    # A discussion turn's and an extraction's JSON schema; AGREEMENT_SCHEMA is for a turn that also
    # states agreement with the current solution (None: free text).
    ANSWER_SCHEMA: dict[str, Any] | None
    AGREEMENT_SCHEMA: dict[str, Any] | None
    system_template: str  # $persona
    discussion_blocks: tuple[str, ...]
    history_heading: str
    agreement_history_heading: str
    history_line: str
    current_template: str  # $solution
    asks: Mapping[str, str]
    answer_instruction: str
    agreement_instruction: str
    extraction_blocks: tuple[str, ...]  # $question, $previous
    vote_blocks: tuple[str, ...]
    vote_heads: Mapping[str, str]
    vote_tails: Mapping[str, str]
    quote: Callable[[str], str]
    extraction_quote: Callable[[str], str]
    render_knowledge: Callable[[Sequence[KnowledgeItem]], str]

    def system(self, persona: str | None, agent: int) -> str:
        return fill(self.system_template, persona=persona_line(persona, agent))

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
        lines = "\n".join(fill(self.history_line, who=who, answer=self.quote(text)) for who, text in history)
        heading = self.agreement_history_heading if agreement else self.history_heading
        ask = "agreement" if agreement else ("improve" if history else "propose")
        user = fill_blocks(
            self.discussion_blocks,
            question=question,
            knowledge=self.render_knowledge(knowledge),
            history=heading + lines if lines else "",
            current=fill(self.current_template, solution=current_solution)
            if current_solution and agreement
            else "",
            ask=self.asks[ask],
            instruction=self.agreement_instruction if agreement else self.answer_instruction,
        )
        return system_user(self.system(persona, agent), user)

    def extraction(self, question: str, previous: str, persona: str | None, agent: int) -> list[ChatMessage]:
        """E.1: the final solution extracted from the last agent's previous response."""
        user = fill_blocks(
            self.extraction_blocks, question=question, previous=self.extraction_quote(previous)
        )
        return system_user(self.system(persona, agent), user)

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
        example = {"a": base, "b": base + 2, "c": base + 1}  # the ranked prompt's example ranking
        user = fill_blocks(
            self.vote_blocks,
            head=fill(self.vote_heads.get(decision, ""), points=points),
            tail=fill(self.vote_tails[decision], points=points, **example),
            question=question,
            solutions=solution_list(solutions, base),
        )
        return system_user(self.system(persona, agent), user)

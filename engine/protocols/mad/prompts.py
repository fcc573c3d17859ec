"""``mad``'s prompts, written once over the texts its styles differ in, and what both styles share.

Paper style (``paper.py``): the meta prompts of §2 with the "tit for tat" sentence of the chosen level
(Table 11), the affirmative/negative debater prompts, the moderator prompt of §2 and the JSON verdict
and two-step extractive judge of the authors' released configuration
(github.com/Skytliang/Multi-Agents-Debate, ``config4all.json``), which the paper describes but does
not print. Robust style (``robust.py``): the same flow with one-sentence roles, (K3) knowledge, short
answers asked for as JSON and the verdicts as JSON with a schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.prompts.compose import fill
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


def conversation(system: str, turns: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    """A system prompt and alternating (user, assistant) turns; an empty assistant ends the list."""
    msgs: list[ChatMessage] = [{"role": "system", "content": system}]
    for user, assistant in turns:
        msgs.append({"role": "user", "content": user})
        if assistant:
            msgs.append({"role": "assistant", "content": assistant})
    return msgs


@dataclass(frozen=True)
class MadPrompts:
    """One style of ``mad``'s prompts: templates with ``$`` slots, filled by the methods below."""

    # The debaters' answers, the moderator's verdict and the extractive judge's final answer, as JSON
    # schemas (None: free text).
    ANSWER_SCHEMA: dict[str, Any] | None
    VERDICT_SCHEMA: dict[str, Any] | None
    FINAL_SCHEMA: dict[str, Any] | None
    # $tit_for_tat, $question, $side and the side's own prompt ($side_prompt, from side_prompts).
    debater_system_template: str
    side_prompts: Mapping[str, str]
    opening_template: str  # $question
    rebut_first_template: str  # $opponent: the affirmative's answer
    respond_template: str  # $opponent: the other side's last argument
    moderator_system_template: str  # $question
    moderator_template: str  # $round, $ordinal, $affirmative, $negative
    judge_candidates_template: str  # $affirmative, $negative
    judge_final_template: str  # $question
    # How a debater's turn is quoted to its opponent, and the two sides' to the moderator and judge.
    turn_quote: Callable[[str], str]
    verdict_quote: Callable[[str], str]
    render_knowledge: Callable[[Sequence[KnowledgeItem]], str]

    def debater_system(self, question: str, level: int, side: str) -> str:
        """The meta prompt plus the side's debater prompt (§2)."""
        return fill(
            self.debater_system_template,
            tit_for_tat=TIT_FOR_TAT[level],
            question=question,
            side=side,
            side_prompt=self.side_prompts.get(side, ""),
        )

    def opening(self, question: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """The affirmative's first turn: the topic itself."""
        return self._turn(fill(self.opening_template, question=question), knowledge)

    def rebut_first(self, affirmative: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """The negative's first turn: the affirmative's answer to disagree with."""
        text = fill(self.rebut_first_template, opponent=self.turn_quote(affirmative))
        return self._turn(text, knowledge)

    def respond(self, opponent: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """Later turns of both sides: the opponent's last argument."""
        return self._turn(fill(self.respond_template, opponent=self.turn_quote(opponent)), knowledge)

    def _turn(self, text: str, knowledge: Sequence[KnowledgeItem]) -> str:
        """The agent's chosen knowledge (rendered in its style) ahead of the turn's text."""
        rendered = self.render_knowledge(knowledge)
        return f"{rendered}\n\n{text}" if rendered else text

    def moderator_system(self, question: str) -> str:
        return fill(self.moderator_system_template, question=question)

    def moderator(self, round: int, affirmative: str, negative: str) -> str:
        return fill(
            self.moderator_template,
            round=round,
            ordinal=ordinal(round),
            affirmative=self.verdict_quote(affirmative),
            negative=self.verdict_quote(negative),
        )

    def judge_candidates(self, affirmative: str, negative: str) -> str:
        """Extractive judge, step 1: the answer candidates."""
        return fill(
            self.judge_candidates_template,
            affirmative=self.verdict_quote(affirmative),
            negative=self.verdict_quote(negative),
        )

    def judge_final(self, question: str) -> str:
        """Extractive judge, step 2: the final answer as JSON."""
        return fill(self.judge_final_template, question=question)

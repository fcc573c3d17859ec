"""``kks``'s prompts, written once over the texts its styles differ in, and what both styles share.

Paper style (``paper.py``): Appendix C.1 (initial proposal), C.2 (debate phase and self-adjustment
phase, with the agents-context / previous-context blocks) and C.3 (final decision), with the sample
game and sample reasoning of C.1 kept verbatim. Robust style (``robust.py``): short instructions, the
same JSON replies (sent with a schema), the game info once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.prompts.compose import fill
from services.chat_model import ChatMessage

RULES = (
    "Game Rules:\n- Knights always tell the truth.\n- Knaves always lie.\n- Spies can either tell the truth "
    "or lie.\n- The hints from the game manager are always true."
)
SAMPLE = """Sample game info:
---
Player name: Violet
Player statement: Among all players, the number of spies is odd.
---
Player name: Uma
Player statement: Violet is lying.
---
Player name: Xavier
Player statement: Among Violet and I, there is exactly one knave.
---
Message from the game manager: I am the game manager and here is a hint for you: Among all players, there is exactly one spy.
Sample return:
{
"players": [
{"name": "Violet", "role": "knight"},
{"name": "Uma", "role": "knave"},
{"name": "Xavier", "role": "spy"}
],
"explanation": "the argument to derive the result."
}
To fulfill the task, you should use the hints to deduce the truthfulness of the statements. You need to exhaust the possibility of the truthfulness of the statements and the role assignments, and either run into a contradiction which implies that the assumption is false, or reach a conclusion that is consistent with the hints. Rules for reasoning:
- Do not make extra assumptions beyond the game rules and hints. For example, if not mentioned explicitly, do not assume that there must be any particular roles among players.
- Do not conclude that the roles are not conclusive before you explicitly find two possibilities that are consistent with all the rules and hints, in which case you should mention both or all possibilities in the explanation.
Sample reasoning for the sample game info:
- The hint tells us that there is exactly one spy, so Violet is telling the truth. By the rule for the roles, he cannot be a knave.
- Since Violet is telling the truth, Uma must be lying. By the rule for the roles, she cannot be a knight.
- Assume Xavier is telling the truth, since we have deduced that Violet is not a knave, Xavier must be the knave himself, but the rule imposed that knaves always lie, so this is a contradiction. Therefore, Xavier must be lying.
- Since Uma and Xavier are both lying, and the hint says there is exactly one spy, one of them must be a knave.
- Assume Xavier is the knave, then since Violet cannot be a knave, Xavier is actually telling the truth, which contradicts with the rule that knaves always lie. Therefore, Xavier must be the spy, and Uma must be the knave.
- Since there is only one spy, and Xavier has taken the slot, Violet must be the knight. Therefore, the output is (remember to follow the format strictly):
{
"players": [
{"name": "Violet", "role": "knight"},
{"name": "Uma", "role": "knave"},
{"name": "Xavier", "role": "spy"}
],
"explanation": "copy the above arguments here."
}
Keep your explanation having details but less than 100 words."""  # noqa: E501 - the paper's text verbatim
CRITICAL_ALL = """CRITICAL REQUIREMENTS:
- You MUST assign each player one of the three roles: "knight", "knave", or "spy"
- Do NOT use "unknown" or any other value - you must make a definitive choice for each player
- Base your decision on the game logic and evidence from the statements and hints
- If youre uncertain, choose the most likely role based on available evidence
Please follow strictly the format of the return, or the response will be rejected."""
CONFIDENCE_JSON = ' Add "confidence": an integer from 1 to 10 saying how sure you are.'


@dataclass(frozen=True)
class Position:
    """An agent's current view of one player (or its whole assignment) as others see it."""

    agent: str
    role: str
    reasoning: str = ""
    confidence: int | None = None


def agent_name(i: int) -> str:
    return f"Agent {i + 1}"


def positions_block(title: str, positions: Sequence[Position], me: str, show_conf: bool) -> str:
    lines = [title]
    for p in positions:
        lines.append(f"- {p.agent}{' (YOU)' if p.agent == me else ''}: {p.role}")
        if p.reasoning:
            lines.append(f"Reasoning: {p.reasoning[:400]}")
        if show_conf and p.confidence is not None:
            lines.append(f"Confidence: {p.confidence}")
    return "\n".join(lines)


@dataclass(frozen=True)
class KksPrompts:
    """One style of ``kks``'s prompts: one user message each, templates with ``$`` slots.

    The slots: ``$game``, ``$n_players``, ``$me``, ``$player``, ``$others`` (the other agents' names),
    ``$positions``, ``$earlier``, ``$analysis`` and ``$solutions`` (``positions_block``s) and ``$conf``
    (``CONFIDENCE_JSON`` in the assignment prompts, ``role_confidence`` in the debate's, when asked for).
    """

    # A full assignment and one player's role, as JSON schemas (None: the JSON is asked for in text).
    ASSIGNMENT_SCHEMA: dict[str, Any] | None
    ROLE_SCHEMA: dict[str, Any] | None
    initial_template: str
    debate_template: str
    role_confidence: str
    adjust_template: str
    final_template: str

    def initial(self, game: str, n_players: int, confidence: bool) -> list[ChatMessage]:
        """C.1: each agent's independent proposal for all players."""
        conf = CONFIDENCE_JSON if confidence else ""
        return _user(fill(self.initial_template, game=game, n_players=n_players, conf=conf))

    def debate(
        self,
        me: str,
        player: str,
        game: str,
        positions: Sequence[Position],
        earlier: Sequence[Position],
        others: Sequence[str],
        confidence: bool,
    ) -> list[ChatMessage]:
        """C.2 debate phase: one agent's argument about one player's role."""
        text = fill(
            self.debate_template,
            me=me,
            player=player,
            game=game,
            positions=positions_block("CURRENT AGENT POSITIONS:", positions, me, confidence),
            earlier=positions_block("ARGUMENTS SO FAR IN THIS DEBATE:", earlier, me, confidence)
            if earlier
            else "",
            others=", ".join(others),
            conf=self.role_confidence if confidence else "",
        )
        return _user(text)

    def adjust(
        self,
        me: str,
        player: str,
        game: str,
        arguments: Sequence[Position],
        latest: Sequence[Position],
        confidence: bool,
    ) -> list[ChatMessage]:
        """C.2 self-adjustment phase: the agent's complete solution after the debate about ``player``."""
        text = fill(
            self.adjust_template,
            me=me,
            player=player,
            game=game,
            analysis=positions_block("CURRENT DEBATE ANALYSIS:", arguments, me, confidence),
            solutions=positions_block(LATEST, latest, me, confidence),
            conf=CONFIDENCE_JSON if confidence else "",
        )
        return _user(text)

    def final(self, me: str, game: str, latest: Sequence[Position], confidence: bool) -> list[ChatMessage]:
        """C.3: the final decision for all players."""
        solutions = positions_block(LATEST, latest, me, confidence)
        return _user(fill(self.final_template, me=me, game=game, solutions=solutions))


LATEST = "LATEST COMPLETE SOLUTIONS FROM EACH AGENT:"


def _user(text: str) -> list[ChatMessage]:
    return [{"role": "user", "content": text}]

"""Prompts of Wu et al. (2025), the Knight–Knave–Spy debate framework, in Parley's two styles.

Paper style: Appendix C.1 (initial proposal), C.2 (debate phase and self-adjustment phase, with the
agents-context / previous-context blocks) and C.3 (final decision), with the sample game and sample
reasoning of C.1 kept verbatim. Robust style: short instructions, the same JSON replies (sent with a
schema), the game info once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.llm import ChatMessage

ASSIGNMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "players": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "role": {"type": "string", "enum": ["knight", "knave", "spy"]},
                },
                "required": ["name", "role"],
            },
        },
        "explanation": {"type": "string"},
        "confidence": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["players", "explanation"],
}
ROLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "player_role": {"type": "string"},
        "role": {"type": "string", "enum": ["knight", "knave", "spy"]},
        "agree_with": {"type": "array", "items": {"type": "string"}},
        "disagree_with": {"type": "array", "items": {"type": "string"}},
        "agree_reasoning": {"type": "string"},
        "disagree_reasoning": {"type": "string"},
        "confidence": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["role"],
}

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


def _positions(title: str, positions: Sequence[Position], me: str, show_conf: bool) -> str:
    lines = [title]
    for p in positions:
        lines.append(f"- {p.agent}{' (YOU)' if p.agent == me else ''}: {p.role}")
        if p.reasoning:
            lines.append(f"Reasoning: {p.reasoning[:400]}")
        if show_conf and p.confidence is not None:
            lines.append(f"Confidence: {p.confidence}")
    return "\n".join(lines)


def initial(style: str, game: str, n_players: int, confidence: bool) -> list[ChatMessage]:
    """C.1: each agent's independent proposal for all players."""
    conf = CONFIDENCE_JSON if confidence else ""
    if style == "paper":
        text = (
            "You are participating in a multi-agent debate about a Knight-Knave-Spy game. There are "
            f"{n_players} other players in the game, each assigned a role of knight, knave, or spy. Each "
            "player will make a statement about themselves and other players. Besides those players, there "
            "is "
            f"also a game manager who will provide you some hints.\n{RULES}\nYour task is to deduce the "
            "role of "
            "each player based on the statements and hints. You will be participating in a debate with other "
            "agents, and you can see the conversation history including your own previous responses and "
            "those "
            "of other agents.\nYour task is to deduce the role of each player, based on the statements and "
            "the "
            'hints. The result should be given in the following json format:\n{\n"players": [\n{"name": '
            '"player_name", "role": '
            '"role"},\n...\n],\n"explanation": "string"\n}\nThe players array contains '
            "objects with name and role strings. Include one entry for each player. Explanation is a string "
            f"that contains the argument to derive the result.{conf}\n{SAMPLE}\n{CRITICAL_ALL}\n\nGame "
            f"info:\n{game}"
        )
    else:
        text = (
            f"{RULES}\n\n{game}\n\nDeduce every player's role (exactly one spy). Reply with JSON only: "
            '{"players": [{"name": "...", "role": "knight|knave|spy"}, ...], '
            f'"explanation": "under 100 words"}}{conf}'
        )
    return [{"role": "user", "content": text}]


def debate(
    style: str,
    me: str,
    player: str,
    game: str,
    positions: Sequence[Position],
    earlier: Sequence[Position],
    others: Sequence[str],
    confidence: bool,
) -> list[ChatMessage]:
    """C.2 debate phase: one agent's argument about one player's role."""
    ctx = _positions("CURRENT AGENT POSITIONS:", positions, me, confidence)
    prev = _positions("ARGUMENTS SO FAR IN THIS DEBATE:", earlier, me, confidence) if earlier else ""
    conf = ',\n"confidence": 1-10' if confidence else ""
    if style == "paper":
        text = (
            f"You are {me} participating in a debate about {player}'s role in this Knight-Knaves-Spy game.\n"
            f"GAME INFORMATION:\n{game}\nCURRENT FOCUS: We are debating the role of "
            f"{player}.\n{ctx}\n{prev}\n"
            f"OTHER AVAILABLE AGENTS IN THIS DEBATE: {', '.join(others)}\nYour task is to:\n"
            f"1. Analyze the other agents positions on {player}'s role from the conversation history\n"
            "2. Decide which OTHER agents you agree with and which you disagree with (do NOT include "
            "yourself)\n"
            "3. Provide reasoning for your agreements and disagreements\n"
            f"4. Make your final decision on {player}'s role\nCRITICAL REQUIREMENTS:\n"
            f'- You MUST assign {player} one of the three roles: "knight", "knave", or "spy"\n'
            '- Do NOT use "unknown" or any other value - you must make a definitive choice\n'
            f"- Do NOT consider other players roles when making your decision (only consider {player})\n"
            'Return your response in JSON format:\n{\n"player_role": "' + player + '",\n"role": '
            '"knight/knave/spy",\n"agree_with": ["other_agent_name1", '
            '"other_agent_name2"],\n"disagree_with": '
            '["other_agent_name3"],\n"agree_reasoning": "Brief reasoning for '
            'agreements",\n"disagree_reasoning": '
            f'"Brief reasoning for disagreements"{conf}\n}}'
        )
    else:
        text = (
            f"{RULES}\n\n{game}\n\nYou are {me}. The team is debating {player}'s role.\n{ctx}\n{prev}\n"
            f"Which role is right for {player}? Reply with JSON only: "
            '{"role": "knight|knave|spy", "agree_with": [...], "disagree_with": [...], '
            '"agree_reasoning": "...", "disagree_reasoning": "..."'
            + (', "confidence": 1-10' if confidence else "")
            + "}"
        )
    return [{"role": "user", "content": text}]


def adjust(
    style: str,
    me: str,
    player: str,
    game: str,
    arguments: Sequence[Position],
    latest: Sequence[Position],
    confidence: bool,
) -> list[ChatMessage]:
    """C.2 self-adjustment phase: the agent's complete solution after the debate about ``player``."""
    analysis = _positions("CURRENT DEBATE ANALYSIS:", arguments, me, confidence)
    sols = _positions("LATEST COMPLETE SOLUTIONS FROM EACH AGENT:", latest, me, confidence)
    conf = CONFIDENCE_JSON if confidence else ""
    if style == "paper":
        text = (
            f"You are {me}. Based on the debate about {player}'s role, please provide your complete solution "
            f"for ALL players.\nGAME INFORMATION:\n{game}\nCURRENT FOCUS: We just finished debating "
            f"{player}'s "
            f"role.\n{analysis}\n{sols}\nBased on the debate, please provide your self-adjustment solution "
            "on all "
            "players.\nCRITICAL REQUIREMENTS:\n- In this self-adjustment phase, you must provide a complete "
            f'assignment of roles for all players, not just {player}.\n- Do not use "unknown" or any '
            'placeholder values - you must make a definitive choice for each player from "knight", '
            '"knave", or '
            '"spy".\nReturn your complete solution in JSON format:\n{\n"players": [\n{"name": "player_name", '
            '"role": "role"},\n{"name": "another_player", "role": "role"},\n...\n],\n"explanation": "Your '
            "reasoning after considering the "
            f'debate"\n}}{conf}\nREMINDER: Include ALL players in the "players" '
            "array, each with their assigned role."
        )
    else:
        text = (
            f"{RULES}\n\n{game}\n\nYou are {me}. The debate about {player} has ended.\n{analysis}\n{sols}\n"
            "Give your complete solution for ALL players. Reply with JSON only: "
            '{"players": [{"name": "...", "role": "knight|knave|spy"}, ...], "explanation": "..."}' + conf
        )
    return [{"role": "user", "content": text}]


def final(style: str, me: str, game: str, latest: Sequence[Position], confidence: bool) -> list[ChatMessage]:
    """C.3: the final decision for all players."""
    sols = _positions("LATEST COMPLETE SOLUTIONS FROM EACH AGENT:", latest, me, confidence)
    if style == "paper":
        text = (
            "This is the FINAL DISCUSSION phase. You have access to the complete debate history.\n"
            f"GAME INFORMATION:\n{game}\n{sols}\nNow make your final decision for ALL players. You can "
            "reference the entire conversation history including your own responses and those of other "
            "agents."
            f"\n{CRITICAL_ALL}\nReturn your solution in JSON format:\n"
            '{\n"players": [\n{"name": "player_name", "role": "role"},\n...\n],\n"explanation": "string"\n}'
        )
    else:
        text = (
            f"{RULES}\n\n{game}\n\nYou are {me}.\n{sols}\nGive your final solution for ALL players. Reply "
            "with "
            'JSON only: {"players": [{"name": "...", "role": "knight|knave|spy"}, ...], "explanation": "..."}'
        )
    return [{"role": "user", "content": text}]

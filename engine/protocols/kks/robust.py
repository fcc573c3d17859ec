"""``kks`` in the robust style: short instructions, JSON replies sent with a schema."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.protocols.kks.prompts import (
    CONFIDENCE_JSON,
    RULES,
    Position,
    positions_block,
)
from services.chat_model import ChatMessage

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


def initial(game: str, n_players: int, confidence: bool) -> list[ChatMessage]:
    conf = CONFIDENCE_JSON if confidence else ""
    text = (
        f"{RULES}\n\n{game}\n\nDeduce every player's role (exactly one spy). Reply with JSON only: "
        '{"players": [{"name": "...", "role": "knight|knave|spy"}, ...], '
        f'"explanation": "under 100 words"}}{conf}'
    )
    return [{"role": "user", "content": text}]


def debate(
    me: str,
    player: str,
    game: str,
    positions: Sequence[Position],
    earlier: Sequence[Position],
    others: Sequence[str],
    confidence: bool,
) -> list[ChatMessage]:
    ctx = positions_block("CURRENT AGENT POSITIONS:", positions, me, confidence)
    prev = positions_block("ARGUMENTS SO FAR IN THIS DEBATE:", earlier, me, confidence) if earlier else ""
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
    me: str,
    player: str,
    game: str,
    arguments: Sequence[Position],
    latest: Sequence[Position],
    confidence: bool,
) -> list[ChatMessage]:
    analysis = positions_block("CURRENT DEBATE ANALYSIS:", arguments, me, confidence)
    sols = positions_block("LATEST COMPLETE SOLUTIONS FROM EACH AGENT:", latest, me, confidence)
    conf = CONFIDENCE_JSON if confidence else ""
    text = (
        f"{RULES}\n\n{game}\n\nYou are {me}. The debate about {player} has ended.\n{analysis}\n{sols}\n"
        "Give your complete solution for ALL players. Reply with JSON only: "
        '{"players": [{"name": "...", "role": "knight|knave|spy"}, ...], "explanation": "..."}' + conf
    )
    return [{"role": "user", "content": text}]


def final(me: str, game: str, latest: Sequence[Position], confidence: bool) -> list[ChatMessage]:
    sols = positions_block("LATEST COMPLETE SOLUTIONS FROM EACH AGENT:", latest, me, confidence)
    text = (
        f"{RULES}\n\n{game}\n\nYou are {me}.\n{sols}\nGive your final solution for ALL players. Reply "
        "with "
        'JSON only: {"players": [{"name": "...", "role": "knight|knave|spy"}, ...], "explanation": "..."}'
    )
    return [{"role": "user", "content": text}]

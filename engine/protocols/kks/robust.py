"""``kks`` in the robust style: short instructions, JSON replies sent with a schema."""

from __future__ import annotations

from typing import Any

from engine.protocols.kks.prompts import RULES, KksPrompts

CONFIDENCE_FIELD: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 10}
ROLE: dict[str, Any] = {"type": "string", "enum": ["knight", "knave", "spy"]}
ASSIGNMENT_JSON = '{"players": [{"name": "...", "role": "knight|knave|spy"}, ...], "explanation": "..."}'

ROBUST = KksPrompts(
    ASSIGNMENT_SCHEMA={
        "type": "object",
        "properties": {
            "players": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "role": ROLE},
                    "required": ["name", "role"],
                },
            },
            "explanation": {"type": "string"},
            "confidence": CONFIDENCE_FIELD,
        },
        "required": ["players", "explanation"],
    },
    ROLE_SCHEMA={
        "type": "object",
        "properties": {
            "player_role": {"type": "string"},
            "role": ROLE,
            "agree_with": {"type": "array", "items": {"type": "string"}},
            "disagree_with": {"type": "array", "items": {"type": "string"}},
            "agree_reasoning": {"type": "string"},
            "disagree_reasoning": {"type": "string"},
            "confidence": CONFIDENCE_FIELD,
        },
        "required": ["role"],
    },
    initial_template=(
        f"{RULES}\n\n$game\n\nDeduce every player's role (exactly one spy). Reply with JSON only: "
        '{"players": [{"name": "...", "role": "knight|knave|spy"}, ...], '
        '"explanation": "under 100 words"}$conf'
    ),
    debate_template=(
        f"{RULES}\n\n$game\n\nYou are $me. The team is debating $player's role.\n$positions\n$earlier\n"
        "Which role is right for $player? Reply with JSON only: "
        '{"role": "knight|knave|spy", "agree_with": [...], "disagree_with": [...], '
        '"agree_reasoning": "...", "disagree_reasoning": "..."$conf}'
    ),
    role_confidence=', "confidence": 1-10',
    adjust_template=(
        f"{RULES}\n\n$game\n\nYou are $me. The debate about $player has ended.\n$analysis\n$solutions\n"
        f"Give your complete solution for ALL players. Reply with JSON only: {ASSIGNMENT_JSON}$conf"
    ),
    final_template=(
        f"{RULES}\n\n$game\n\nYou are $me.\n$solutions\nGive your final solution for ALL players. Reply "
        f"with JSON only: {ASSIGNMENT_JSON}"
    ),
)

"""Assembling prompt text: the helpers every style and protocol prompt module shares."""

from __future__ import annotations

from services.chat_model import ChatMessage


def join_blocks(*parts: str) -> str:
    """The non-empty parts as paragraphs (an optional block left empty leaves no blank gap)."""
    return "\n\n".join(p for p in parts if p)


def system_user(system: str, user: str) -> list[ChatMessage]:
    """A two-message chat: the role in the system message, the task in the user message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]

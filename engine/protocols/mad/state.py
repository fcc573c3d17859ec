"""``mad``'s checkpoint state: what a redelivered job resumes from (stored as JSON in the job store).

A ``TypedDict`` so the stored form stays the plain dict it always was; ``ProtocolRun.resume_state``
validates a stored state against it before the runner reads it.
"""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict


class MadState(TypedDict):
    """After each round: both sides' and the moderator's turns, the answers, the moderator's verdict."""

    aff: list[list[str]]
    neg: list[list[str]]
    mod: list[list[str]]
    answers: list[list[str | None]]
    verdict: NotRequired[dict[str, Any] | None]

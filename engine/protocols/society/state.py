"""``society``'s checkpoint state: what a redelivered job resumes from (stored as JSON in the job store).

A ``TypedDict`` so the stored form stays the plain dict it always was; ``ProtocolRun.resume_state``
validates a stored state against it before the runner reads it.
"""

from __future__ import annotations

from typing_extensions import TypedDict


class SocietyState(TypedDict):
    """After each round: every agent's responses, answers and stated confidences so far."""

    responses: list[list[str]]
    answers: list[list[str | None]]
    confidences: list[list[int | None]]

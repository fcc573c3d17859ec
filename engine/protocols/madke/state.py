"""``madke``'s checkpoint state: what a redelivered job resumes from (stored as JSON in the job store).

A ``TypedDict`` so the stored form stays the plain dict it always was; ``ProtocolRun.resume_state``
validates a stored state against it before the runner reads it.
"""

from __future__ import annotations

from typing_extensions import TypedDict


class MadkeState(TypedDict):
    """After each round: every agent's responses and answers so far, and whether the judge saw consensus."""

    responses: list[list[str]]
    answers: list[list[str | None]]
    consensus: bool

"""``kks``'s checkpoint state: what a redelivered job resumes from (stored as JSON in the job store).

A ``TypedDict`` so the stored form stays the plain dict it always was; ``ProtocolRun.resume_state``
validates a stored state against it before the runner reads it.
"""

from __future__ import annotations

from typing_extensions import TypedDict


class KksState(TypedDict):
    """After each step: every agent's assignment, explanation and confidence, steps done, abstentions."""

    assign: list[dict[str, str]]
    expl: list[str]
    conf: list[int | None]
    done: int
    abstentions: int

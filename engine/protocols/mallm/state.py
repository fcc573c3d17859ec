"""``mallm``'s checkpoint state: what a redelivered job resumes from (stored as JSON in the job store).

A ``TypedDict`` so the stored form stays the plain dict it always was; ``ProtocolRun.resume_state``
validates a stored state against it before the runner reads it.
"""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict


class Agreement(TypedDict):
    solution: str | None
    proposer: int | None
    supporters: list[int]


class MallmState(TypedDict):
    """After each turn: the turns so far, the agreement being counted, the decision, the next vote."""

    turns: list[list[dict[str, Any]]]
    agreement: Agreement
    decided: NotRequired[dict[str, Any] | None]
    next_vote: NotRequired[int]

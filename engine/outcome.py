"""The common shape every protocol returns to the runner, and the protocol function signature."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter

from engine.context import DebateContext
from engine.result import Checkpoint

CheckpointSink = Callable[[Checkpoint], Awaitable[None]]
S = TypeVar("S")


@dataclass
class Outcome:
    answer: str | None
    answer_source: str
    rounds: int
    consensus: bool
    final_answers: list[str | None] = field(default_factory=list)


class ProtocolRun:
    """What a protocol receives besides the context: where to checkpoint and what to resume from."""

    def __init__(
        self,
        on_checkpoint: CheckpointSink | None = None,
        resume: Checkpoint | None = None,
        gold: list[str] | None = None,
    ) -> None:
        self.on_checkpoint = on_checkpoint
        self.resume = resume
        self.gold = gold

    def resume_state(self, kind: type[S]) -> S | None:
        """The state to resume from, validated as the protocol's state type (its ``state.py``), or
        None for a fresh debate; a stored state of the wrong shape fails here, not deep in a round."""
        if self.resume is None:
            return None
        return TypeAdapter(kind).validate_python(self.resume.state)

    async def checkpoint(self, ctx: DebateContext, round: int, state: Mapping[str, Any]) -> None:
        if self.on_checkpoint is not None:
            await self.on_checkpoint(
                Checkpoint(
                    round=round,
                    transcript=list(ctx.transcript),
                    state=dict(state),
                    pool_added=[it for it in ctx.pool.items if it.found_by is not None],
                )
            )


ProtocolRunner = Callable[[DebateContext, ProtocolRun], Awaitable[Outcome]]


class StatefulDebate:
    """A protocol whose debate is an object holding its state between turns (KKS, MALLM): the context,
    the run and the configuration, and ``run`` to the outcome. ``start`` is its ``ProtocolRunner``."""

    def __init__(self, ctx: DebateContext, run: ProtocolRun) -> None:
        self.ctx = ctx
        self.run_info = run
        self.cfg = ctx.config

    async def run(self) -> Outcome:
        raise NotImplementedError

    @classmethod
    async def start(cls, ctx: DebateContext, run: ProtocolRun) -> Outcome:
        return await cls(ctx, run).run()

"""A usage sink for engine tests: it keeps every ``Spend`` the debate charges."""

from __future__ import annotations

from engine.context import Spend


class Sink:
    """The usage sink: every ``Spend`` it is told."""

    def __init__(self) -> None:
        self.spends: list[Spend] = []

    async def __call__(self, spend: Spend) -> None:
        self.spends.append(spend)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.spends)

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.spends)

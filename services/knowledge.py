"""The knowledge contract shared by the retriever, the workers and the engine.

A *knowledge item* is one passage or search snippet; ``n`` is the 1-based number agents see. A
*pool* is SKPool(q) of the MADKE paper (Eq. 1): Wikipedia items first, then web items.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

KnowledgeSource = Literal["wikipedia", "web"]


class KnowledgeItem(BaseModel):
    n: int = Field(ge=1, description="1-based number shown to agents")
    source: KnowledgeSource
    title: str
    text: str
    url: str | None = None
    score: float = 0.0


class KnowledgePool(BaseModel):
    pool_id: str
    question: str
    items: list[KnowledgeItem] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    cached: bool = False
    timings_ms: dict[str, float] = Field(default_factory=dict)

    def restricted(self, sources: set[str]) -> KnowledgePool:
        """The same pool keeping only ``sources``, renumbered from 1 so agents never see gaps."""
        kept = [it for it in self.items if it.source in sources]
        items = [it.model_copy(update={"n": i}) for i, it in enumerate(kept, start=1)]
        return self.model_copy(update={"items": items})

    def by_number(self) -> dict[int, KnowledgeItem]:
        return {it.n: it for it in self.items}


def empty_pool(question: str) -> KnowledgePool:
    """A pool with no items, for protocols run without knowledge."""
    return KnowledgePool(pool_id="none", question=question)


class PoolBuilder(Protocol):
    """Anything that builds SKPool(q): the retriever service's HTTP client or the in-process retriever."""

    async def build_pool(self, question: str, k_wiki: int = 5, k_web: int = 5) -> KnowledgePool: ...

"""The knowledge contract shared by the retriever, the workers and the engine.

A *knowledge item* is one passage or search snippet; ``n`` is the 1-based number agents see. A
*pool* is SKPool(q) of the MADKE paper (Eq. 1): Wikipedia items first, then web items.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

KnowledgeSource = Literal["wikipedia", "web"]


class SearchProvenance(BaseModel):
    """Who added an item to a pool during a debate, when, and with what search."""

    agent: int = Field(ge=0, description="0-based agent whose search found the item")
    round: int = Field(ge=0, description="the round after which it searched (0: before the first)")
    query: str = Field(description="the search the agent wrote")


class KnowledgeItem(BaseModel):
    n: int = Field(ge=1, description="1-based number shown to agents")
    source: KnowledgeSource
    title: str
    text: str
    url: str | None = None
    score: float = 0.0
    found_by: SearchProvenance | None = Field(
        default=None, description="set on items a debater's search added during the debate"
    )


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

    @property
    def first_items(self) -> list[KnowledgeItem]:
        """The items the pool held before the debate (none added by a debater's search)."""
        return [it for it in self.items if it.found_by is None]

    def limited(self, k_wiki: int, k_web: int) -> KnowledgePool:
        """The first ``k_wiki`` Wikipedia and ``k_web`` web items, renumbered from 1 (wiki first).

        A pool given with a question (a published benchmark's precomputed pool) may hold more items
        than a configuration asks for; this is the reference code's ``wiki_num``/``google_num`` cut."""
        wiki = [it for it in self.items if it.source == "wikipedia"][:k_wiki]
        web = [it for it in self.items if it.source == "web"][:k_web]
        items = [it.model_copy(update={"n": i}) for i, it in enumerate(wiki + web, start=1)]
        return self.model_copy(update={"items": items})


class GivenKnowledge(BaseModel):
    """A knowledge item supplied with a question instead of retrieved: no number yet, text may be empty."""

    source: KnowledgeSource
    title: str = ""
    text: str = ""
    url: str | None = None
    score: float = 0.0


def pool_from_items(question: str, given: list[GivenKnowledge], pool_id: str) -> tuple[KnowledgePool, int]:
    """A pool from items that came with the question: Wikipedia first (as SKPool orders them), numbered
    from 1; an item without text is dropped, since an agent could only select an empty passage.
    Returns the pool and how many items were dropped."""
    kept = [g for g in given if g.text.strip()]
    ordered = [g for g in kept if g.source == "wikipedia"] + [g for g in kept if g.source == "web"]
    items = [
        KnowledgeItem(
            n=i, source=g.source, title=g.title.strip(), text=g.text.strip(), url=g.url, score=g.score
        )
        for i, g in enumerate(ordered, start=1)
    ]
    return KnowledgePool(pool_id=pool_id, question=question, items=items), len(given) - len(kept)


def empty_pool(question: str) -> KnowledgePool:
    """A pool with no items, for protocols run without knowledge."""
    return KnowledgePool(pool_id="none", question=question)


class PoolBuilder(Protocol):
    """Anything that builds SKPool(q): the retriever service's HTTP client or the in-process retriever.

    ``search_text`` (a passage the debate's model wrote, ``DebateConfig.search_query="passage"``) is
    searched after the question by the Wikipedia searches and is part of the pool's cache key; the
    pool's ``question`` stays the question."""

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool: ...

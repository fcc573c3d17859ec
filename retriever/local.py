"""In-process retrieval for ``parley ask`` when no ``PARLEY_RETRIEVER_URL`` is set.

It runs the same components as the service on the embedded store, in the calling process. Because the
embedded store allows one process per folder, this cannot run while a retriever service holds the same
data dir; ``open`` then fails with ``StoreLocked`` and a message saying so.
"""

from __future__ import annotations

from retriever.indexer import ensure_index
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings
from services.knowledge import KnowledgePool

__all__ = ["LocalPoolBuilder", "ensure_index"]


class LocalPoolBuilder:
    """A ``services.knowledge.PoolBuilder`` that builds pools in-process (model and JVM load lazily once)."""

    def __init__(self, runtime: RetrieverRuntime) -> None:
        self._rt = runtime

    @classmethod
    def open(cls, settings: RetrieverSettings | None = None) -> LocalPoolBuilder:
        """Open the store (call ``ensure_index`` first on a fresh checkout) and sweep expired pools."""
        rt = RetrieverRuntime.open(settings or RetrieverSettings())
        rt.sweep()
        return cls(rt)

    @property
    def runtime(self) -> RetrieverRuntime:
        return self._rt

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        """SKPool(question), exactly as the service would build it (``search_text`` as in the service's
        ``POST /v1/pools``)."""
        return await self._rt.pools.build_pool(question, k_wiki, k_web, search_text=search_text)

    async def get_pool(self, pool_id: str) -> KnowledgePool | None:
        return await self._rt.pools.get_pool(pool_id)

    async def aclose(self) -> None:
        await self._rt.aclose()

    def close(self) -> None:
        """Synchronous close, safe inside or outside a running event loop (async code: ``aclose``)."""
        self._rt.close()

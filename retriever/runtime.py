"""The retriever's long-lived resources in one place, shared by the HTTP app and the in-process builder.

Opening is cheap (store handle, settings); the embedding model and the JVM load lazily on first use or
eagerly with ``warm()`` (the app does that in its lifespan so the first request is not the slow one).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from retriever.bm25 import Bm25Index
from retriever.embedder import Embedder
from retriever.encoders import make_embedder
from retriever.pools import PoolService, PoolStore
from retriever.rerank import BiEncoderRescorer
from retriever.search import WikiRetriever
from retriever.settings import RetrieverSettings
from retriever.store_port import PassageStore, PoolBackend
from retriever.stores import open_passages, open_stores
from retriever.websearch import BraveSearch, SearxngSearch, SerperSearch, WebSearch

# all-MiniLM-L6-v2's size; used to create the pools collection without loading the model first.
_KNOWN_DIMS = {"all-MiniLM-L6-v2": 384}


class ConfigError(ValueError):
    """The settings ask for something that cannot work (e.g. Serper without a key)."""


def make_web_search(settings: RetrieverSettings, client: httpx.AsyncClient | None = None) -> WebSearch | None:
    """The configured web provider, or None for ``web_provider=none`` (pools are then Wikipedia-only)."""
    kw = {"timeout_s": settings.web_timeout_s, "client": client}
    if settings.web_provider == "none":
        return None
    if settings.web_provider == "serper":
        if settings.serper_api_key is None:
            raise ConfigError("web_provider=serper needs PARLEY_RETRIEVER_SERPER_API_KEY")
        return SerperSearch(settings.serper_api_key.get_secret_value(), url=settings.serper_url, **kw)
    if settings.web_provider == "brave":
        if settings.brave_api_key is None:
            raise ConfigError("web_provider=brave needs PARLEY_RETRIEVER_BRAVE_API_KEY")
        return BraveSearch(settings.brave_api_key.get_secret_value(), url=settings.brave_url, **kw)
    if settings.searxng_url is None:
        raise ConfigError("web_provider=searxng needs PARLEY_RETRIEVER_SEARXNG_URL")
    return SearxngSearch(settings.searxng_url, **kw)


def open_reranker(settings: RetrieverSettings, first_stage_passages: int) -> BiEncoderRescorer | None:
    """The second stage the settings ask for, checked now: a stage whose weights or vectors are missing
    stops the start with a message naming the fix (``RerankUnavailable``), never a silent downgrade."""
    if settings.rerank_model is None:
        return None
    stage = settings.rerank_settings()
    store = open_passages(stage)
    try:
        reranker = BiEncoderRescorer(
            settings, store, make_embedder(stage, threads=settings.serve_torch_threads)
        )
        reranker.check(first_stage_passages)
    except BaseException:
        store.close()
        raise
    return reranker


@dataclass
class RetrieverRuntime:
    settings: RetrieverSettings
    store: PoolBackend  # the knowledge pools
    passages: PassageStore
    embedder: Embedder
    wiki: WikiRetriever
    pools: PoolService
    web: WebSearch | None
    http: httpx.AsyncClient | None
    reranker: BiEncoderRescorer | None = None
    _closed: bool = False
    _closing: asyncio.Task[None] | None = None

    @classmethod
    def open(
        cls,
        settings: RetrieverSettings,
        *,
        embedder: Embedder | None = None,
        web: WebSearch | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> RetrieverRuntime:
        """Open the stores and wire the components; ``web``/``transport`` let tests swap the network."""
        passages, store = open_stores(settings)
        reranker: BiEncoderRescorer | None = None
        try:
            emb = embedder or make_embedder(settings, threads=settings.serve_torch_threads)
            bm25 = (
                Bm25Index(settings.bm25_dir)
                if settings.bm25_enabled and Bm25Index.available(settings.bm25_dir)
                else None
            )
            reranker = open_reranker(settings, passages.count())
            wiki = WikiRetriever(settings, passages, emb, bm25, reranker)
            http = None
            if web is None and settings.web_provider != "none":
                http = httpx.AsyncClient(timeout=settings.web_timeout_s, transport=transport)
                web = make_web_search(settings, http)
            dim = passages.dim() or _KNOWN_DIMS.get(settings.model_name) or emb.dim
            pool_store = PoolStore(store, dim, settings.pool_ttl_s)
            service = PoolService(settings, wiki, pool_store, web)
        except BaseException:
            passages.close()
            store.close()
            if reranker is not None:
                reranker.store.close()
            raise
        return cls(settings, store, passages, emb, wiki, service, web, http, reranker)

    def warm(self) -> None:
        """Load the model, the passage store's pages and the JVM now rather than on the first request."""
        vec = self.embedder.embed(["warm-up"])[0]
        if self.passages.count():
            self.passages.search(vec, 1)
        if self.wiki.bm25 is not None:
            self.wiki.bm25.warm()
        if self.reranker is not None:
            self.reranker.embedder.embed(["warm-up"])

    def sweep(self) -> int:
        return self.pools.sweep()

    def close(self) -> None:
        """Synchronous close (for sync callers, even inside a running loop): JVM searcher and store now;
        the web client's sockets are closed on the running loop if there is one, else right here."""
        if self._closed:
            return
        self._closed = True
        http_closers = [c.aclose() for c in (self.web, self.http) if c is not None]
        if http_closers:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None

            async def _all() -> None:
                for co in http_closers:
                    await co

            if loop is None:
                asyncio.run(_all())
            else:
                self._closing = loop.create_task(_all())
        self.pools.close()
        if self.wiki.bm25 is not None:
            self.wiki.bm25.close()
        self.passages.close()
        self.store.close()
        if self.reranker is not None:
            self.reranker.store.close()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.web is not None:
            await self.web.aclose()
        if self.http is not None:
            await self.http.aclose()
        await asyncio.to_thread(self.pools.close)
        if self.wiki.bm25 is not None:
            await asyncio.to_thread(self.wiki.bm25.close)
        self.passages.close()
        self.store.close()
        if self.reranker is not None:
            self.reranker.store.close()

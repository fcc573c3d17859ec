"""Wikipedia retrieval WR(q): dense (cosine over MiniLM vectors), BM25 (Lucene), and their hybrid.

Hybrid is reciprocal-rank fusion (Cormack, Clarke & Büttcher 2009): score(d) = Σ 1/(k + rank_r(d)) over
the retrievers that returned d. We use k = 60, the value of the original paper and of most RRF
implementations: it flattens the head of each ranking enough that a passage ranked well by *both*
retrievers beats one ranked first by only one of them, while still preferring higher ranks. RRF uses
ranks only, so the incomparable scales of BM25 scores and cosines never need calibrating.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from retriever.bm25 import Bm25Index
from retriever.indexer import BUILD_HINT, IndexMissing
from retriever.settings import RetrieverSettings, SearchMode
from services.embedder import Embedder
from services.vector_store import Hit, VectorStore, point_id


@dataclass(frozen=True)
class PassageHit:
    pid: str
    title: str
    text: str
    url: str | None
    score: float
    vector: np.ndarray | None = None


def rrf_fuse(rankings: list[list[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion of several rankings of ids; ties keep first-seen order."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


def _from_hit(h: Hit, score: float | None = None) -> PassageHit:
    pl = h.payload
    return PassageHit(
        pid=str(pl.get("pid", h.id)),
        title=str(pl.get("title") or ""),
        text=str(pl.get("text") or ""),
        url=pl.get("url"),
        score=h.score if score is None else score,
        vector=h.vector,
    )


class WikiRetriever:
    """Dense, BM25 and hybrid search over the passage collection; the heavy parts load lazily once."""

    def __init__(
        self,
        settings: RetrieverSettings,
        store: VectorStore,
        embedder: Embedder,
        bm25: Bm25Index | None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.bm25 = bm25
        self._ready = False

    @property
    def has_bm25(self) -> bool:
        return self.bm25 is not None

    def default_mode(self) -> SearchMode:
        """``hybrid`` when the BM25 index exists, else ``dense`` (unless the settings fix a mode)."""
        if self.settings.default_mode != "auto":
            return self.settings.default_mode
        return "hybrid" if self.has_bm25 else "dense"

    def check_ready(self) -> None:
        """Raise ``IndexMissing`` (→ 503) until the dense collection holds passages."""
        if self._ready:
            return
        if self.store.count(self.settings.collection) == 0:
            raise IndexMissing(
                f"the Wikipedia index ({self.settings.collection} in {self.store.location}) is empty "
                f"or missing: {BUILD_HINT}"
            )
        self._ready = True

    async def embed_query(self, text: str) -> np.ndarray:
        vecs = await asyncio.to_thread(self.embedder.embed, [text])
        return vecs[0]

    async def search(
        self,
        query: str,
        k: int,
        mode: SearchMode | None = None,
        *,
        qvec: np.ndarray | None = None,
        with_vectors: bool = False,
        timings: dict[str, float] | None = None,
    ) -> list[PassageHit]:
        """Top-k passages for ``query``; ``timings`` (if given) receives per-stage milliseconds."""
        self.check_ready()
        mode = mode or self.default_mode()
        if mode in ("bm25", "hybrid") and self.bm25 is None:
            raise IndexMissing(f"the BM25 index is missing at {self.settings.bm25_dir}: {BUILD_HINT}")
        timings = timings if timings is not None else {}
        if k <= 0:
            return []
        if mode == "bm25":
            return await self._bm25_only(query, k, with_vectors, timings)
        if qvec is None:
            t = time.perf_counter()
            qvec = await self.embed_query(query)
            timings["embed_ms"] = _ms(t)
        depth = k if mode == "dense" else max(k, self.settings.fusion_depth)
        dense_task = asyncio.create_task(self._dense(qvec, depth, with_vectors or mode == "hybrid", timings))
        if mode == "dense":
            return (await dense_task)[:k]
        assert self.bm25 is not None
        t = time.perf_counter()
        sparse = await self.bm25.asearch(query, depth)
        timings["bm25_ms"] = _ms(t)
        dense = await dense_task
        t = time.perf_counter()
        fused = rrf_fuse([[h.pid for h in dense], [pid for pid, _ in sparse]], k=self.settings.rrf_k)[:k]
        known = {h.pid: h for h in dense}
        missing = [pid for pid, _ in fused if pid not in known]
        for h in await self._by_pids(missing, with_vectors=True):
            known[h.pid] = h
        out = [_replace_score(known[pid], score) for pid, score in fused if pid in known]
        timings["fuse_ms"] = _ms(t)
        return out

    async def _dense(
        self, qvec: np.ndarray, k: int, with_vectors: bool, timings: dict[str, float]
    ) -> list[PassageHit]:
        t = time.perf_counter()
        hits = await asyncio.to_thread(
            self.store.search, self.settings.collection, qvec, k, with_vectors=with_vectors
        )
        timings["dense_ms"] = _ms(t)
        return [_from_hit(h) for h in hits]

    async def _bm25_only(
        self, query: str, k: int, with_vectors: bool, timings: dict[str, float]
    ) -> list[PassageHit]:
        assert self.bm25 is not None
        t = time.perf_counter()
        sparse = await self.bm25.asearch(query, k)
        timings["bm25_ms"] = _ms(t)
        by_pid = {h.pid: h for h in await self._by_pids([p for p, _ in sparse], with_vectors=with_vectors)}
        return [_replace_score(by_pid[pid], score) for pid, score in sparse if pid in by_pid]

    async def _by_pids(self, pids: list[str], *, with_vectors: bool) -> list[PassageHit]:
        if not pids:
            return []
        hits = await asyncio.to_thread(
            self.store.retrieve,
            self.settings.collection,
            [point_id(p) for p in pids],
            with_vectors=with_vectors,
        )
        return [_from_hit(h) for h in hits]


def _replace_score(h: PassageHit, score: float) -> PassageHit:
    return PassageHit(h.pid, h.title, h.text, h.url, score, h.vector)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 2)


Mode = Literal["dense", "bm25", "hybrid"]

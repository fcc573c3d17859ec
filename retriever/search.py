"""Wikipedia retrieval WR(q): dense (cosine over MiniLM vectors), BM25 (Lucene), and their hybrid.

Hybrid is weighted reciprocal-rank fusion (Cormack, Clarke & Büttcher 2009): score(d) = Σ_r w_r / (k +
rank_r(d)) over the top-50 lists of the retrievers that returned d. RRF uses ranks only, so BM25 scores
and cosines never need calibrating. Our constants are k = 5, w_dense = 1, w_bm25 = 0.5, not the usual
k = 60 with equal weights, because pools keep only the top 5 and our two retrievers are unequal:

- with k = 60 the fused head is nearly flat (1/61 vs 1/65), so a passage that BM25 alone puts 3rd can
  displace dense's 2nd; a small k lets the head of each list decide, which is what a 5-item pool needs;
- dense MiniLM is the stronger retriever on NQ-style questions (answer recall@5 0.37 vs BM25's 0.26 on
  nq_open_vital_dev), so a BM25 rank counts half: BM25's 1st equals dense's 7th, while a passage that
  both put 3rd (1/8 + 0.5/8) still beats dense's 1st alone.

They were chosen on the even-numbered half of nq_open_vital_dev and checked on the odd half (held out):
there hybrid recall@5/@10 is 0.395/0.441 vs dense 0.381/0.427 and BM25 0.27/0.34, while plain k = 60
RRF falls *below* dense at @5 (0.347 vs 0.374 on all questions). ``bench/retrieval_bench.py`` reports
both. ``PARLEY_RETRIEVER_RRF_K`` and ``…_RRF_BM25_WEIGHT`` restore k = 60 / 1.0 for other corpora.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np
from typing_extensions import TypedDict, Unpack

from retriever.bm25 import Bm25Index
from retriever.embedder import Embedder
from retriever.manifest import BUILD_HINT, IndexMissing, outdated_index_hint
from retriever.rerank import BiEncoderRescorer
from retriever.settings import RetrieverSettings, SearchMode
from retriever.store_port import Hit, PassageStore, point_id


@dataclass(frozen=True)
class PassageHit:
    pid: str
    title: str
    text: str
    url: str | None
    score: float
    vector: np.ndarray | None = None


def rrf_fuse(
    rankings: list[list[str]], k: int = 60, weights: list[float] | None = None
) -> list[tuple[str, float]]:
    """(Weighted) reciprocal-rank fusion of several rankings of ids; ties keep first-seen order."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[str, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
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


class SearchOptions(TypedDict, total=False):
    """The keyword options of ``WikiRetriever.search``, the same as ``search_and_embed``'s."""

    qvec: np.ndarray | None
    with_vectors: bool
    timings: dict[str, float] | None
    rerank: bool | None


@dataclass(eq=False)
class WikiRetriever:
    """Dense, BM25 and hybrid search over the passage collection; the heavy parts load lazily once."""

    settings: RetrieverSettings
    store: PassageStore
    embedder: Embedder
    bm25: Bm25Index | None
    reranker: BiEncoderRescorer | None = None
    _bm25_opening: asyncio.Lock = field(init=False, default_factory=asyncio.Lock, repr=False)
    _ready: bool = field(init=False, default=False, repr=False)  # the dense collection held passages once

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
        if self.store.count() == 0:
            raise IndexMissing(
                outdated_index_hint(self.settings)
                or f"the Wikipedia index ({self.settings.collection} in {self.store.location}) is empty "
                f"or missing: {BUILD_HINT}"
            )
        self._ready = True

    async def embed_query(self, text: str) -> np.ndarray:
        vecs = await asyncio.to_thread(self.embedder.embed_queries, [text])
        return vecs[0]

    async def search(
        self, query: str, k: int, mode: SearchMode | None = None, **options: Unpack[SearchOptions]
    ) -> list[PassageHit]:
        """Top-k passages for ``query`` (``search_and_embed`` without the query vector)."""
        hits, _ = await self.search_and_embed(query, k, mode, **options)
        return hits

    def uses_rerank(self, rerank: bool | None) -> bool:
        """Whether a search with this ``rerank`` request runs the second stage here."""
        return self.reranker is not None and rerank is not False

    async def search_and_embed(
        self,
        query: str,
        k: int,
        mode: SearchMode | None = None,
        *,
        qvec: np.ndarray | None = None,
        with_vectors: bool = False,
        timings: dict[str, float] | None = None,
        rerank: bool | None = None,
    ) -> tuple[list[PassageHit], np.ndarray | None]:
        """Top-k passages for ``query`` and the query vector computed for them (None for pure BM25 or
        k = 0), so the pool builder can overlap embedding with BM25 and still reuse the vector for dedupe
        and caching. ``timings`` (if given) receives per-stage milliseconds. ``rerank`` None uses the
        second stage when one is configured; False skips it; True asks for it (ignored when the
        deployment has none: the caller reads ``uses_rerank``)."""
        self.check_ready()
        mode = mode or self.default_mode()
        if mode in ("bm25", "hybrid") and self.bm25 is None:
            raise IndexMissing(f"the BM25 index is missing at {self.settings.bm25_dir}: {BUILD_HINT}")
        timings = timings if timings is not None else {}
        if k <= 0:
            return [], qvec
        reranker = self.reranker if self.uses_rerank(rerank) else None
        if reranker is not None:
            if mode in ("bm25", "hybrid"):
                # BM25 is opened (the JVM started) before the second encoder's query starts. The order
                # is harmless and no longer needed: opening BM25 imports no Python library beyond
                # pyjnius (Anserini is called directly, not through pyserini's Python package, which
                # imported transformers and raced a torch encoder's first load on another thread).
                await self._open_bm25()
            # The second encoder's query runs on its own thread while the first stage searches.
            rerank_query = asyncio.create_task(self._rerank_query(reranker, query, timings))
            try:
                depth = max(k, self.settings.rerank_depth)
                first, qvec = await self._first_stage(query, depth, mode, qvec, with_vectors, timings)
                ranked = await self._second_stage(reranker, await rerank_query, first, k, timings)
            finally:
                rerank_query.cancel()
        else:
            first, qvec = await self._first_stage(query, k, mode, qvec, with_vectors, timings)
            ranked = [(h.pid, h.score) for h in first[:k]]
        known = {h.pid: h for h in first}
        missing = [pid for pid, _ in ranked if pid not in known]
        for h in await self._by_pids(missing, with_vectors=with_vectors):
            known[h.pid] = h
        return [_replace_score(known[pid], score) for pid, score in ranked if pid in known], qvec

    async def _open_bm25(self) -> None:
        """Open the BM25 index on its first use (starts the JVM; imports no Python library beyond
        pyjnius), once; concurrent first queries wait, then overlap."""
        assert self.bm25 is not None
        if not self.bm25.is_open:
            async with self._bm25_opening:
                await asyncio.to_thread(self.bm25.warm)

    async def _rerank_query(
        self, reranker: BiEncoderRescorer, query: str, timings: dict[str, float]
    ) -> np.ndarray:
        t = time.perf_counter()
        vec = await reranker.embed_query(query)
        timings["rerank_encode_ms"] = elapsed_ms(t)
        return vec

    async def _second_stage(
        self,
        reranker: BiEncoderRescorer,
        rqvec: np.ndarray,
        first: list[PassageHit],
        k: int,
        timings: dict[str, float],
    ) -> list[tuple[str, float]]:
        """Weighted RRF of the first-stage order and the second encoder's cosine order, top k."""
        s = self.settings
        t = time.perf_counter()
        head = [h.pid for h in first[: s.rerank_depth]]
        extra = await reranker.nearest(rqvec, s.rerank_candidates) if s.rerank_candidates else []
        candidates = list(dict.fromkeys([*head, *extra]))  # the first stage's, then the new ones, once each
        rescored = await reranker.rescore(rqvec, candidates)
        if s.rerank_first_stage_weight > 0:
            fused = rrf_fuse(
                [head, rescored.order], k=s.rerank_rrf_k, weights=[s.rerank_first_stage_weight, 1.0]
            )
        else:
            fused = [(p, rescored.cosine.get(p, 0.0)) for p in rescored.order]
        timings["rerank_ms"] = elapsed_ms(t)
        return fused[:k]

    async def _first_stage(
        self,
        query: str,
        k: int,
        mode: SearchMode,
        qvec: np.ndarray | None,
        with_vectors: bool,
        timings: dict[str, float],
    ) -> tuple[list[PassageHit], np.ndarray | None]:
        """Dense, BM25 or hybrid top-k, best first (hybrid: weighted RRF of the two top-``fusion_depth``)."""
        if mode == "bm25":
            return await self._bm25_only(query, k, with_vectors, timings), qvec
        depth = k if mode == "dense" else max(k, self.settings.fusion_depth)
        # BM25 needs only the text: it runs on its JVM thread while the query is embedded. Its first use
        # opens the index (starts the JVM) before that, which is harmless: opening it imports no Python
        # library beyond pyjnius, so nothing can race the embedder's first load on another thread.
        sparse_task = None
        if mode == "hybrid":
            assert self.bm25 is not None
            await self._open_bm25()
            sparse_task = asyncio.create_task(self._sparse(query, depth, timings))
        if qvec is None:
            t = time.perf_counter()
            qvec = await self.embed_query(query)
            timings["embed_ms"] = elapsed_ms(t)
        dense = await self._dense(qvec, depth, with_vectors or mode == "hybrid", timings)
        if sparse_task is None:
            return dense[:k], qvec
        sparse = await sparse_task
        t = time.perf_counter()
        fused = rrf_fuse(
            [[h.pid for h in dense], [pid for pid, _ in sparse]],
            k=self.settings.rrf_k,
            weights=[1.0, self.settings.rrf_bm25_weight],
        )[:k]
        known = {h.pid: h for h in dense}
        missing = [pid for pid, _ in fused if pid not in known]
        for h in await self._by_pids(missing, with_vectors=True):
            known[h.pid] = h
        out = [_replace_score(known[pid], score) for pid, score in fused if pid in known]
        timings["fuse_ms"] = elapsed_ms(t)
        return out, qvec

    async def _dense(
        self, qvec: np.ndarray, k: int, with_vectors: bool, timings: dict[str, float]
    ) -> list[PassageHit]:
        t = time.perf_counter()
        hits = await asyncio.to_thread(self.store.search, qvec, k, with_vectors=with_vectors)
        timings["dense_ms"] = elapsed_ms(t)
        return [_from_hit(h) for h in hits]

    async def _sparse(self, query: str, depth: int, timings: dict[str, float]) -> list[tuple[str, float]]:
        assert self.bm25 is not None
        t = time.perf_counter()
        sparse = await self.bm25.asearch(query, depth)
        timings["bm25_ms"] = elapsed_ms(t)
        return sparse

    async def _bm25_only(
        self, query: str, k: int, with_vectors: bool, timings: dict[str, float]
    ) -> list[PassageHit]:
        assert self.bm25 is not None
        t = time.perf_counter()
        sparse = await self.bm25.asearch(query, k)
        timings["bm25_ms"] = elapsed_ms(t)
        by_pid = {h.pid: h for h in await self._by_pids([p for p, _ in sparse], with_vectors=with_vectors)}
        return [_replace_score(by_pid[pid], score) for pid, score in sparse if pid in by_pid]

    async def _by_pids(self, pids: list[str], *, with_vectors: bool) -> list[PassageHit]:
        if not pids:
            return []
        hits = await asyncio.to_thread(
            self.store.retrieve,
            [point_id(p) for p in pids],
            with_vectors=with_vectors,
        )
        return [_from_hit(h) for h in hits]


def _replace_score(h: PassageHit, score: float) -> PassageHit:
    return PassageHit(h.pid, h.title, h.text, h.url, score, h.vector)


def elapsed_ms(t0: float) -> float:
    """Milliseconds since ``t0`` (a ``time.perf_counter()`` reading), as the timings report them."""
    return round((time.perf_counter() - t0) * 1000.0, 2)

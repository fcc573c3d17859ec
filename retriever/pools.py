"""SKPool(q) = WR(q) ∪ GSE(q) (MADKE Eq. 1): assembly, near-duplicate removal, numbering and caching.

Pools live in their own Qdrant Edge shard (``<data_dir>/edge/knowledge_pools``) or in the collection
``knowledge_pools`` on the Qdrant server next to the passages. Three kinds of points,
all with deterministic ids so every lookup is a by-id retrieve (O(1) in embedded mode, where filtered
scans are brute force):

- ``item``  id(pool_id, n): one knowledge item (payload: pool_id, question_hash, source, rank, title,
  url, text, score, created_at; vector: the item's embedding);
- ``pool``  id(pool_id, 0): the pool header (item count, question, warnings; vector: the question);
- ``cache`` id(question_hash): the cache entry pointing at the current pool for a normalised question
  and parameters.

Writes go items+header first, cache entry last, so a reader that finds the cache entry always finds a
complete pool; concurrent requests for the same key in this process share one build (single flight).
Writes happen behind the response on one save thread; until a pool is saved, this process serves it
from memory (so a GET right after the POST finds it), and shutdown and sweeps wait for pending saves.
Pools whose web search failed are stored (``GET`` works) but not cached, so the next request retries
the provider instead of serving a degraded pool for the whole TTL. Expired points are swept by
``created_at``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
import time
import unicodedata
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from retriever.query_text import clean_text, search_query, searched_text
from retriever.search import PassageHit, WikiRetriever, elapsed_ms
from retriever.settings import RetrieverSettings
from retriever.store_port import PoolBackend, point_id
from retriever.websearch import WebResult, WebSearch, WebSearchError
from services.knowledge import KnowledgeItem, KnowledgePool

MAX_K = 50
log = logging.getLogger("parley.retriever")


class InvalidRequest(ValueError):
    """Bad input (empty or huge question or search text, k outside 0..50): a 422 for the HTTP layer."""


def normalize_question(question: str) -> str:
    """The cache key form: NFKC, lower-case, single spaces, no trailing punctuation."""
    q = unicodedata.normalize("NFKC", question).lower()
    q = " ".join(q.split())
    return re.sub(r"[\s?.!]+$", "", q)


def _norm_url(url: str | None) -> str | None:
    """Compare URLs loosely: scheme, ``www.``/mobile Wikipedia hosts, fragments and trailing slashes."""
    if not url:
        return None
    u = url.strip().lower().split("#", 1)[0]
    u = re.sub(r"^https?://", "", u)
    u = re.sub(r"^(www\.|m\.)", "", u)
    u = u.replace(".m.wikipedia.org", ".wikipedia.org")
    return u.rstrip("/")


@dataclass
class _Candidate:
    source: str
    title: str
    text: str
    url: str | None
    score: float
    vector: np.ndarray | None


def dedupe(candidates: list[_Candidate], threshold: float) -> list[_Candidate]:
    """Keep candidates in order, dropping near-duplicates of an already kept one.

    A near-duplicate is a web result whose URL equals a kept item's URL, or any candidate whose
    embedding cosine with a kept item is ≥ ``threshold``. Wikipedia passages of one article share the
    article URL but are distinct passages, so the URL rule applies to web results only.
    """
    kept: list[_Candidate] = []
    urls: set[str] = set()
    vecs: list[np.ndarray] = []
    for c in candidates:
        nu = _norm_url(c.url)
        if c.source == "web" and nu is not None and nu in urls:
            continue
        if c.vector is not None and vecs and float(np.max(np.stack(vecs) @ c.vector)) >= threshold:
            continue
        kept.append(c)
        if nu is not None:
            urls.add(nu)
        if c.vector is not None:
            vecs.append(c.vector)
    return kept


class PoolStore:
    """The ``knowledge_pools`` collection: save, fetch by id, fetch by cache key, sweep expired."""

    def __init__(self, store: PoolBackend, dim: int, ttl_s: float) -> None:
        self.store = store
        self.dim = dim
        self.ttl_s = ttl_s
        store.ensure(dim)

    @staticmethod
    def _item_id(pool_id: str, rank: int) -> str:
        return point_id(f"pool:{pool_id}:{rank}")

    @staticmethod
    def _cache_id(question_hash: str) -> str:
        return point_id(f"cache:{question_hash}")

    def save(
        self,
        pool: KnowledgePool,
        question_hash: str,
        qvec: np.ndarray,
        item_vectors: list[np.ndarray],
        *,
        cache: bool,
        now: float | None = None,
    ) -> None:
        """Write the pool's items and header, then (if ``cache``) the cache entry that publishes it."""
        now = time.time() if now is None else now
        ids, vecs, payloads = [], [], []
        for it, vec in zip(pool.items, item_vectors, strict=True):
            ids.append(self._item_id(pool.pool_id, it.n))
            vecs.append(vec)
            payloads.append(
                {
                    "kind": "item",
                    "pool_id": pool.pool_id,
                    "question_hash": question_hash,
                    "source": it.source,
                    "rank": it.n,
                    "title": it.title,
                    "url": it.url,
                    "text": it.text,
                    "score": it.score,
                    "created_at": now,
                }
            )
        ids.append(self._item_id(pool.pool_id, 0))
        vecs.append(qvec)
        payloads.append(
            {
                "kind": "pool",
                "pool_id": pool.pool_id,
                "question_hash": question_hash,
                "source": "pool",
                "rank": 0,
                "title": "",
                "url": None,
                "text": pool.question,
                "n_items": len(pool.items),
                "warnings": pool.warnings,
                "created_at": now,
            }
        )
        self.store.upsert(ids, np.stack(vecs), payloads)
        if cache:
            entry = {
                "kind": "cache",
                "question_hash": question_hash,
                "pool_id": pool.pool_id,
                "created_at": now,
            }
            self.store.upsert([self._cache_id(question_hash)], qvec[None, :], [entry])

    def get(self, pool_id: str, *, now: float | None = None) -> KnowledgePool | None:
        """The stored pool, or None when unknown or expired."""
        now = time.time() if now is None else now
        head = self.store.retrieve([self._item_id(pool_id, 0)])
        if not head or now - float(head[0].payload.get("created_at", 0)) > self.ttl_s:
            return None
        hp = head[0].payload
        n_items = int(hp.get("n_items", 0))
        ids = [self._item_id(pool_id, n) for n in range(1, n_items + 1)]
        recs = self.store.retrieve(ids)
        if len(recs) != n_items:  # partially swept: treat as gone
            return None
        items = [
            KnowledgeItem(
                n=int(r.payload["rank"]),
                source=r.payload["source"],
                title=r.payload.get("title") or "",
                text=r.payload.get("text") or "",
                url=r.payload.get("url"),
                score=float(r.payload.get("score") or 0.0),
            )
            for r in recs
        ]
        return KnowledgePool(
            pool_id=pool_id,
            question=str(hp.get("text", "")),
            items=items,
            warnings=list(hp.get("warnings") or []),
        )

    def lookup(self, question_hash: str, *, now: float | None = None) -> KnowledgePool | None:
        """The cached pool for a key, or None when there is none or it expired."""
        now = time.time() if now is None else now
        entry = self.store.retrieve([self._cache_id(question_hash)])
        if not entry or now - float(entry[0].payload.get("created_at", 0)) > self.ttl_s:
            return None
        return self.get(str(entry[0].payload["pool_id"]), now=now)

    def sweep(self, *, now: float | None = None) -> int:
        """Delete every point (items, headers, cache entries) older than the TTL; returns the count."""
        now = time.time() if now is None else now
        deleted = self.store.delete_where_less("created_at", now - self.ttl_s)
        if deleted:
            # Deleted points keep their space until a vacuum (an embedded shard runs none by itself).
            self.store.compact()
        return deleted


class PoolService:
    """Builds SKPool(q): top-k Wikipedia ∪ top-k web, deduplicated, Wikipedia first, numbered from 1."""

    def __init__(
        self,
        settings: RetrieverSettings,
        wiki: WikiRetriever,
        pools: PoolStore,
        web: WebSearch | None,
    ) -> None:
        self.settings = settings
        self.wiki = wiki
        self.pools = pools
        self.web = web
        self._inflight: dict[str, asyncio.Future[KnowledgePool]] = {}
        self.builds = 0  # pools actually assembled (not served from cache): for tests and metrics
        # Write-behind: the response does not wait for the store (embedded Qdrant commits every point
        # to sqlite: ~8 ms median, ~45 ms p95). Pools wait here until saved, so lookups and GETs in this
        # process see them at once; one save thread keeps writes in order; close/sweep flush first.
        self._unsaved: dict[str, KnowledgePool] = {}  # question_hash -> pool (cacheable pools only)
        self._unsaved_ids: dict[str, KnowledgePool] = {}  # pool_id -> pool
        self._unsaved_lock = threading.Lock()
        self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-pool-save")
        self._pending: set[Future[None]] = set()

    def validate(self, question: str, k_wiki: int, k_web: int) -> str:
        q = clean_text(question.strip())
        if not q:
            raise InvalidRequest("question must not be empty")
        if len(q) > self.settings.max_question_chars:
            raise InvalidRequest(f"question is longer than {self.settings.max_question_chars} characters")
        for name, k in (("k_wiki", k_wiki), ("k_web", k_web)):
            if not 0 <= k <= MAX_K:
                raise InvalidRequest(f"{name} must be between 0 and {MAX_K}, got {k}")
        return q

    def validate_search_text(self, search_text: str | None) -> str | None:
        """The search text as searched (whitespace collapsed; None when absent or blank), or
        ``InvalidRequest`` when it is longer than ``max_search_text_chars``."""
        if search_text is None:
            return None
        limit = self.settings.max_search_text_chars
        if len(search_text) > limit:
            raise InvalidRequest(f"search_text is {len(search_text)} characters; the limit is {limit}")
        return searched_text(search_text)

    def cache_key(
        self,
        question: str,
        k_wiki: int,
        k_web: int,
        rerank: bool | None = None,
        search_text: str | None = None,
    ) -> str:
        """sha256 of the normalised question and everything that changes the pool's content."""
        s = self.settings
        key: dict[str, object] = {
            "q": normalize_question(question),
            "k_wiki": k_wiki,
            "k_web": k_web if self.web is not None else 0,
            "web": self.web.name if self.web is not None else "none",
            "mode": self.wiki.default_mode(),
            "collection": self.settings.collection,
            # Fusion and dedupe settings change which passages a pool holds.
            "fusion": [self.settings.rrf_k, self.settings.rrf_bm25_weight, self.settings.fusion_depth],
            "dedupe": self.settings.dedupe_cosine,
            # The second stage, when this pool ran it, and every setting that changes its order.
            "rerank": (
                [
                    s.rerank_model,
                    s.rerank_depth,
                    s.rerank_candidates,
                    s.rerank_rrf_k,
                    s.rerank_first_stage_weight,
                ]
                if self.wiki.uses_rerank(rerank)
                else None
            ),
        }
        if search_text is not None:
            # Searched after the question, so it changes the pool; absent, the key is what it always was.
            key["search_text"] = search_text
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

    async def build_pool(
        self,
        question: str,
        k_wiki: int = 5,
        k_web: int = 5,
        *,
        rerank: bool | None = None,
        search_text: str | None = None,
    ) -> KnowledgePool:
        """The pool for ``question``: from the cache when fresh, else built once even under concurrency.

        ``rerank`` False skips the deployment's second stage for this pool (None or True use it).
        ``search_text`` (a passage the debate's model wrote) is searched after the question by the
        dense and BM25 searches and the second stage; web search and the pool's ``question`` keep the
        question alone."""
        t0 = time.perf_counter()
        q = self.validate(question, k_wiki, k_web)
        st = self.validate_search_text(search_text)
        self.wiki.check_ready()
        qhash = self.cache_key(q, k_wiki, k_web, rerank, st)
        # Single flight: register before the first await, so a concurrent request for the same key
        # always finds either the in-flight build or (after it) the published cache entry.
        fut = self._inflight.get(qhash)
        if fut is not None:
            pool = await asyncio.shield(fut)
            return pool.model_copy(update={"question": q, "cached": True})
        fut = asyncio.get_running_loop().create_future()
        self._inflight[qhash] = fut
        try:
            with self._unsaved_lock:
                cached = self._unsaved.get(qhash)
            if cached is None:
                cached = await asyncio.to_thread(self.pools.lookup, qhash)
            if cached is not None:
                ms = elapsed_ms(t0)
                pool = cached.model_copy(
                    update={"question": q, "cached": True, "timings_ms": {"cache_ms": ms, "total_ms": ms}}
                )
            else:
                pool = await self._assemble(q, qhash, k_wiki, k_web, t0, rerank, st)
            fut.set_result(pool)
            return pool
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: followers re-raise it, nobody else must
            raise
        finally:
            self._inflight.pop(qhash, None)

    async def _assemble(
        self,
        q: str,
        qhash: str,
        k_wiki: int,
        k_web: int,
        t0: float,
        rerank: bool | None,
        search_text: str | None = None,
    ) -> KnowledgePool:
        timings: dict[str, float] = {}
        warnings: list[str] = []
        web_task = asyncio.create_task(self._web(q, k_web, warnings, timings))
        query = search_query(q, search_text)
        wiki_hits, maybe_qvec = await self.wiki.search_and_embed(
            query, k_wiki, with_vectors=True, timings=timings, rerank=rerank
        )
        if maybe_qvec is None:  # k_wiki = 0 or BM25-only mode: the header and web dedupe still need it
            t = time.perf_counter()
            maybe_qvec = await self.wiki.embed_query(query)
            timings["embed_ms"] = elapsed_ms(t)
        qvec = maybe_qvec
        web_hits, web_failed = await web_task
        t = time.perf_counter()
        web_vecs: np.ndarray | None = None
        if web_hits:
            web_vecs = await asyncio.to_thread(
                self.wiki.embedder.embed, [f"{w.title}. {w.snippet}" for w in web_hits]
            )
        cands = [_wiki_candidate(h) for h in wiki_hits]
        for i, w in enumerate(web_hits):
            vec = web_vecs[i] if web_vecs is not None else None
            cands.append(_Candidate("web", w.title, w.snippet, w.url, 1.0 / w.rank, vec))
        kept = dedupe(cands, self.settings.dedupe_cosine)
        timings["dedupe_ms"] = elapsed_ms(t)
        items = [
            KnowledgeItem(
                n=i, source=c.source, title=c.title, text=c.text, url=c.url, score=round(c.score, 6)
            )
            for i, c in enumerate(kept, start=1)
        ]
        pool = KnowledgePool(pool_id=uuid.uuid4().hex, question=q, items=items, warnings=warnings)
        vecs = [c.vector if c.vector is not None else qvec for c in kept]
        self._save_behind(pool, qhash, qvec, vecs, cache=not web_failed)
        timings["total_ms"] = elapsed_ms(t0)
        self.builds += 1
        return pool.model_copy(update={"timings_ms": timings})

    async def _web(
        self, q: str, k: int, warnings: list[str], timings: dict[str, float]
    ) -> tuple[list[WebResult], bool]:
        if k <= 0:
            return [], False
        if self.web is None:
            warnings.append(
                "no web search provider is configured (PARLEY_RETRIEVER_WEB_PROVIDER): "
                "the pool is Wikipedia-only"
            )
            return [], False
        t = time.perf_counter()
        try:
            return await self.web.search(q, k), False
        except WebSearchError as exc:
            warnings.append(f"web search failed ({exc}): the pool is Wikipedia-only")
            return [], True
        finally:
            timings["web_ms"] = elapsed_ms(t)

    def _save_behind(
        self, pool: KnowledgePool, qhash: str, qvec: np.ndarray, vecs: list[np.ndarray], *, cache: bool
    ) -> None:
        with self._unsaved_lock:
            self._unsaved_ids[pool.pool_id] = pool
            if cache:
                self._unsaved[qhash] = pool

        def save() -> None:
            try:
                self.pools.save(pool, qhash, qvec, vecs, cache=cache)
            except Exception:  # the pool was answered already; it just will not be found later
                log.exception("saving pool %s failed", pool.pool_id)
            finally:
                with self._unsaved_lock:
                    if self._unsaved_ids.get(pool.pool_id) is pool:
                        del self._unsaved_ids[pool.pool_id]
                    if self._unsaved.get(qhash) is pool:
                        del self._unsaved[qhash]

        fut = self._saver.submit(save)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)

    def flush(self) -> None:
        """Block until every pool built so far is in the store (before sweeps, shutdown, tests)."""
        for fut in list(self._pending):
            fut.result()

    def close(self) -> None:
        """Flush pending saves and stop the save thread; call before closing the store."""
        self.flush()
        self._saver.shutdown(wait=True)

    def sweep(self, *, now: float | None = None) -> int:
        """Flush, then delete expired pools; returns the number of points removed."""
        self.flush()
        return self.pools.sweep(now=now)

    async def get_pool(self, pool_id: str) -> KnowledgePool | None:
        with self._unsaved_lock:
            pool = self._unsaved_ids.get(pool_id)
        if pool is not None:
            return pool.model_copy(update={"timings_ms": {}, "cached": False})
        return await asyncio.to_thread(self.pools.get, pool_id)


def _wiki_candidate(h: PassageHit) -> _Candidate:
    return _Candidate("wikipedia", h.title, h.text, h.url, h.score, h.vector)

"""Index building: passages → dense vectors in Qdrant, then the BM25 index over the same passages.

The dense collection is the source of truth: the BM25 index is re-derived from its payloads after each
build, so both always cover exactly the same passages, and re-running a build (or adding a corpus)
only overwrites points with the same stable ids. A small ``manifest.json`` in the data dir records
what was built so ``ensure_index`` can be a no-op without opening the store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from retriever.bm25 import bm25_index_exists, build_bm25_index
from retriever.corpus import Passage, read_vital
from retriever.settings import RetrieverSettings
from services.embedder import Embedder, SentenceTransformerEmbedder
from services.jvm import pyserini_available
from services.vector_store import VectorStore, dir_size, point_id


class IndexMissing(RuntimeError):
    """No dense index yet; the message says how to build it."""


BUILD_HINT = "run `parley index build` (default corpus: the bundled Wikipedia Vital Articles)"


@dataclass
class BuildReport:
    corpus: str
    passages: int
    dense_s: float
    bm25_docs: int | None
    bm25_s: float | None
    collection: str
    passages_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.passages_per_s = self.passages / self.dense_s if self.dense_s > 0 else 0.0


def make_embedder(settings: RetrieverSettings, *, threads: int | None = None) -> SentenceTransformerEmbedder:
    """The embedder the settings ask for (bundled all-MiniLM-L6-v2 by default), not yet loaded.

    ``threads=None`` leaves torch's default (all cores), right for index builds; serving passes
    ``serve_torch_threads``.
    """
    return SentenceTransformerEmbedder(
        settings.embedding_model,
        name=settings.model_name,
        device=settings.embedding_device,
        batch_size=settings.embed_batch_size,
        threads=threads,
    )


def open_store(settings: RetrieverSettings) -> VectorStore:
    """The Qdrant server when ``qdrant_url`` is set, else the embedded store under ``data_dir``."""
    key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    return VectorStore.open(path=settings.qdrant_path, url=settings.qdrant_url, api_key=key)


def read_manifest(settings: RetrieverSettings) -> dict[str, Any]:
    try:
        data = json.loads(settings.manifest_path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_manifest(settings: RetrieverSettings, data: dict[str, Any]) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    tmp = settings.manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(settings.manifest_path)


def _batches(items: Iterable[Passage], size: int) -> Iterator[list[Passage]]:
    buf: list[Passage] = []
    for it in items:
        buf.append(it)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


def build_dense(
    settings: RetrieverSettings,
    store: VectorStore,
    embedder: Embedder,
    passages: Iterable[Passage],
    *,
    corpus: str,
    total: int | None = None,
    progress: bool = True,
) -> int:
    """Embed and upsert passages in batches; returns how many were written."""
    store.ensure_collection(settings.collection, embedder.dim)
    n = 0
    bar = tqdm(total=total, unit="psg", desc=f"dense {corpus}", disable=not progress, dynamic_ncols=True)
    try:
        for batch in _batches(passages, settings.upsert_batch_size):
            vecs = embedder.embed([p.embed_text() for p in batch])
            store.upsert(
                settings.collection,
                [point_id(p.id) for p in batch],
                vecs,
                [p.payload(corpus) for p in batch],
            )
            n += len(batch)
            bar.update(len(batch))
    finally:
        bar.close()
    return n


def build_bm25(settings: RetrieverSettings, store: VectorStore, *, progress: bool = True) -> int:
    """Re-derive the BM25 index from every passage in the dense collection."""
    total = store.count(settings.collection)
    bar = tqdm(total=total, unit="psg", desc="bm25", disable=not progress, dynamic_ncols=True)

    def docs() -> Iterator[tuple[str, str]]:
        for _pid, pl in store.scroll_payloads(settings.collection):
            title, text = pl.get("title") or "", pl.get("text") or ""
            yield str(pl["pid"]), (f"{title}\n{text}" if title else text)

    try:
        return build_bm25_index(settings.bm25_dir, docs(), on_batch=bar.update)
    finally:
        bar.close()


def build_index(
    settings: RetrieverSettings,
    passages: Iterable[Passage],
    *,
    corpus: str,
    total: int | None = None,
    progress: bool = True,
    bm25: bool | None = None,
    store: VectorStore | None = None,
    embedder: Embedder | None = None,
) -> BuildReport:
    """Build (or extend) the dense index with ``passages`` and rebuild BM25 over the whole collection.

    ``bm25=None`` builds it when pyserini is importable and ``bm25_enabled`` is set.
    """
    own_store = store is None
    store = store or open_store(settings)
    embedder = embedder or make_embedder(settings)
    try:
        dim = embedder.dim  # loads the model outside the timed part, so passages/s measures encoding
        t0 = time.perf_counter()
        n = build_dense(settings, store, embedder, passages, corpus=corpus, total=total, progress=progress)
        dense_s = time.perf_counter() - t0
        want_bm25 = (settings.bm25_enabled and pyserini_available()) if bm25 is None else bm25
        bm25_docs = bm25_s = None
        if want_bm25:
            t1 = time.perf_counter()
            bm25_docs = build_bm25(settings, store, progress=progress)
            bm25_s = time.perf_counter() - t1
        manifest = read_manifest(settings)
        corpora = manifest.get("corpora", {})
        corpora[corpus] = {"passages": n, "built_at": time.time()}
        manifest.update(
            {
                "collection": settings.collection,
                "embedding_model": embedder.name,
                "dim": dim,
                "passages": store.count(settings.collection),
                "corpora": corpora,
                "store": store.location,
            }
        )
        if bm25_docs is not None:
            manifest["bm25"] = {"docs": bm25_docs, "built_at": time.time()}
        _write_manifest(settings, manifest)
        return BuildReport(corpus, n, dense_s, bm25_docs, bm25_s, settings.collection)
    finally:
        if own_store:
            store.close()


def index_ready(settings: RetrieverSettings) -> bool:
    """Cheap check (no store open) that a dense index for this model exists and BM25 if it can."""
    manifest = read_manifest(settings)
    if manifest.get("collection") != settings.collection or not manifest.get("passages"):
        return False
    if settings.qdrant_url is None and not settings.qdrant_path.exists():
        return False
    want_bm25 = settings.bm25_enabled and pyserini_available()
    return not want_bm25 or bm25_index_exists(settings.bm25_dir)


def ensure_index(settings: RetrieverSettings, *, progress: bool = True, limit: int | None = None) -> None:
    """Build the default Vital-articles index on first use; a quick no-op once it exists.

    Used by ``parley ask`` without a retriever URL, so a fresh checkout answers its first question
    after one ~10-minute build (with a progress bar) instead of an error.
    """
    if index_ready(settings):
        return
    store = open_store(settings)
    try:
        if store.count(settings.collection) == 0:
            passages = list(read_vital(settings.passage_words, limit=limit))
            build_index(
                settings, passages, corpus="vital", total=len(passages), progress=progress, store=store
            )
        elif settings.bm25_enabled and pyserini_available() and not bm25_index_exists(settings.bm25_dir):
            build_bm25(settings, store, progress=progress)
            manifest = read_manifest(settings)
            manifest["bm25"] = {"docs": store.count(settings.collection), "built_at": time.time()}
            _write_manifest(settings, manifest)
    finally:
        store.close()


def index_stats(settings: RetrieverSettings, store: VectorStore | None = None) -> dict[str, Any]:
    """Passages, vector size, model, store location, BM25 state and disk use, for ``parley index stats``."""
    own = store is None
    store = store or open_store(settings)
    try:
        manifest = read_manifest(settings)
        return {
            "passages": store.count(settings.collection),
            "collection": settings.collection,
            "vector_size": store.dim(settings.collection),
            "embedding_model": manifest.get("embedding_model", settings.model_name),
            "store": store.location,
            "store_mode": "embedded" if store.embedded else "server",
            "store_disk_bytes": store.disk_bytes(),
            "bm25_index": str(settings.bm25_dir) if bm25_index_exists(settings.bm25_dir) else None,
            "bm25_docs": (manifest.get("bm25") or {}).get("docs"),
            "bm25_disk_bytes": dir_size(settings.bm25_dir),
            "corpora": manifest.get("corpora", {}),
        }
    finally:
        if own:
            store.close()

"""Index builds: a corpus → passages in the passage store and in the BM25 index, in one resumable pass.

``build_index`` wires the pieces of an ingestion (``retriever.corpus_sources``, the encoder processes
of ``retriever.ingest``, ``retriever.ingest_checkpoint``, ``retriever.vector_shards``) to the passage
store and the Lucene writer, then records what was built in a small ``manifest.json``
(``retriever.manifest``) so ``ensure_index`` and ``index_ready`` need not open the store.

Stores: the passages live in an embedded Qdrant Edge shard (``<data_dir>/edge/<collection>``) or on a
Qdrant server (``PARLEY_RETRIEVER_QDRANT_URL``); the knowledge pools, small and per question, in
qdrant-client's embedded store (``<data_dir>/qdrant``) or on the same server.
"""

from __future__ import annotations

import errno
import json
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retriever import shipped_vectors
from retriever.bm25 import Bm25Writer, bm25_index_exists
from retriever.corpus import Passage, read_vital
from retriever.corpus_sources import CorpusSource, FileSource, ListSource
from retriever.embedder import Embedder
from retriever.encoders import make_embedder
from retriever.ingest import IngestReport, IngestRun
from retriever.ingest_checkpoint import checkpoint_path, rejects_path
from retriever.jvm import pyserini_available
from retriever.manifest import INDEX_FORMAT, outdated_index_hint, read_manifest, write_manifest
from retriever.passage_store import EDGE_VERSION, storage_error
from retriever.settings import RetrieverSettings
from retriever.store_port import PassageStore, VectorStoreError, dir_size
from retriever.stores import open_passages
from retriever.vector_shards import VectorShards

# make_embedder is re-exported for the benchmarks, which build with the same encoder as the index.
__all__ = ["BuildReport", "build_index", "ensure_index", "index_ready", "index_stats", "make_embedder"]


@dataclass
class BuildReport:
    corpus: str
    passages: int
    dense_s: float
    bm25_docs: int | None
    bm25_s: float | None
    collection: str
    ingest: IngestReport | None = None

    @property
    def passages_per_s(self) -> float:
        return self.passages / self.dense_s if self.dense_s > 0 else 0.0


def _source_of(passages: ListSource | FileSource | Iterable[Passage], corpus: str) -> CorpusSource:
    if isinstance(passages, ListSource | FileSource):
        return passages
    items = passages if isinstance(passages, Sequence) else list(passages)
    return ListSource(corpus, items)


def _restart(settings: RetrieverSettings, corpus: str) -> None:
    checkpoint_path(settings, corpus).unlink(missing_ok=True)
    rejects_path(settings, corpus).unlink(missing_ok=True)
    shutil.rmtree(settings.bm25_dir.with_name(settings.bm25_dir.name + ".building"), ignore_errors=True)


def build_index(
    settings: RetrieverSettings,
    passages: ListSource | FileSource | Iterable[Passage],
    *,
    corpus: str,
    total: int | None = None,
    progress: bool = True,
    bm25: bool | None = None,
    store: PassageStore | None = None,
    embedder: Embedder | None = None,
    vectors: Path | None = None,
    workers: int | None = None,
    device: str | None = None,
    restart: bool = False,
    verify_vectors: bool = True,
) -> BuildReport:
    """Build (or extend, or continue) the passage store and the BM25 index with one corpus.

    ``bm25=None`` builds BM25 when pyserini is importable and ``bm25_enabled`` is set. A new build of
    a corpus replaces that corpus (other corpora stay); an unfinished one continues after its
    checkpoint unless ``restart``.
    """
    del total  # the source knows its size
    source = _source_of(passages, corpus)
    cp_file = checkpoint_path(settings, corpus)
    previous = json.loads(cp_file.read_text()) if cp_file.exists() else None
    if restart or (previous and previous.get("done")):
        _restart(settings, corpus)
    resume = cp_file.exists()
    want_bm25 = (settings.bm25_enabled and pyserini_available()) if bm25 is None else bm25
    own_store = store is None
    store = store or open_passages(settings)
    embedder = embedder or make_embedder(settings, device=device)
    writer = (
        Bm25Writer(settings.bm25_dir, threads=settings.bm25_threads, resume=resume, drop_prefix=f"{corpus}:")
        if want_bm25
        else None
    )
    shards = VectorShards(vectors) if vectors is not None else None
    try:
        dim = shards.dim if shards is not None else embedder.dim  # loads the model outside the timing
        if not resume:
            store.delete_corpus(corpus)  # a new build of a corpus replaces it, in BM25 and here alike
        run = IngestRun(
            settings, source, store, embedder, bm25=writer, vectors=shards, workers=workers,
            device=device, progress=progress, checkpoint_file=cp_file, verify_vectors=verify_vectors,
        )  # fmt: skip
        try:
            report = run.run()
        except VectorStoreError:
            raise
        except Exception as exc:  # a full disk surfaces as OSError, Lucene's IOException or Qdrant's error
            if "No space left" in str(exc) or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
                raise storage_error(exc, str(settings.data_dir)) from exc
            raise
        _check_room_for_optimize(settings, store)
        t = time.perf_counter()
        store.finish()
        finish_s = time.perf_counter() - t
        bm25_docs = writer.publish() if writer is not None else None
        writer = None
        _record(settings, store, embedder.name, dim, corpus, report, bm25_docs)
        return BuildReport(
            corpus,
            report.passages,
            report.seconds + finish_s,
            bm25_docs,
            None if bm25_docs is None else report.write_s,
            settings.collection,
            report,
        )
    finally:
        if writer is not None:
            writer.close()
        if own_store:
            store.close()


def _check_room_for_optimize(settings: RetrieverSettings, store: PassageStore) -> None:
    """Qdrant's optimizer rewrites the segments it indexes: it needs about the store's size free."""
    used = store.disk_bytes() or 0
    free = shutil.disk_usage(settings.data_dir).free
    if free < used + settings.min_free_disk_mb * 2**20:
        raise VectorStoreError(
            f"the disk holding {settings.data_dir} is full for the HNSW build ({free / 2**30:.1f} GiB free, "
            f"the store holds {used / 2**30:.1f} GiB): free space and run the same command again"
        )


def _record(
    settings: RetrieverSettings,
    store: PassageStore,
    model: str,
    dim: int,
    corpus: str,
    report: IngestReport,
    bm25_docs: int | None,
) -> None:
    manifest = read_manifest(settings)
    if manifest.get("format") != INDEX_FORMAT:
        manifest = {}
    corpora = manifest.get("corpora", {})
    corpora[corpus] = {
        "passages": report.total_passages,
        "rejected": report.rejected,
        "built_at": time.time(),
    }
    manifest.update(
        {
            "format": INDEX_FORMAT,
            "collection": settings.collection,
            "embedding_model": model,
            "encoder": settings.encoder,
            "dim": dim,
            "passages": store.count(),
            "corpora": corpora,
            "store": store.location,
            "store_engine": f"qdrant-edge {EDGE_VERSION}" if store.embedded else "qdrant server",
        }
    )
    if bm25_docs is not None:
        manifest["bm25"] = {"docs": bm25_docs, "built_at": time.time()}
    write_manifest(settings, manifest)


def index_ready(settings: RetrieverSettings) -> bool:
    """Cheap check (no store open) that a dense index for this encoder exists and BM25 if it can."""
    manifest = read_manifest(settings)
    if manifest.get("format") != INDEX_FORMAT:
        return False
    if manifest.get("collection") != settings.collection or not manifest.get("passages"):
        return False
    if settings.qdrant_url is None and not (settings.edge_path / "edge_config.json").exists():
        return False
    want_bm25 = settings.bm25_enabled and pyserini_available()
    return not want_bm25 or bm25_index_exists(settings.bm25_dir)


def ensure_index(settings: RetrieverSettings, *, progress: bool = True, limit: int | None = None) -> None:
    """Build the default Vital-articles index on first use; a quick no-op once it exists.

    Used by ``parley ask`` without a retriever URL, so a fresh checkout answers its first question
    after one build (with a progress bar) instead of an error. An unfinished build continues.
    """
    if not index_ready(settings):
        hint = outdated_index_hint(settings)
        if hint and progress:
            print(f"note: {hint}; building the new index now")
        passages = list(read_vital(settings.passage_words, limit=limit))
        vectors = None if limit else shipped_shards(settings, "vital")
        build_index(settings, passages, corpus="vital", progress=progress, vectors=vectors)
    if settings.rerank_model is not None and not index_ready(settings.rerank_settings()):
        stage = settings.rerank_settings()
        passages = list(read_vital(settings.passage_words, limit=limit))
        vectors = None if limit else shipped_shards(stage, "vital")
        build_index(stage, passages, corpus="vital", progress=progress, bm25=False, vectors=vectors)


def shipped_shards(settings: RetrieverSettings, corpus: str) -> Path | None:
    """The shipped vectors of ``corpus`` for this encoder as a shards folder, or None when none ship."""
    shipped = shipped_vectors.find(
        corpus, settings.passage_words, settings.model_name, int8_encoder=settings.encoder == "onnx-int8"
    )
    if shipped is None:
        return None
    return shipped_vectors.as_shards(shipped, settings.ingest_dir / "shipped-vectors")


def index_stats(settings: RetrieverSettings, store: PassageStore | None = None) -> dict[str, Any]:
    """Passages, vector size, model, store location, BM25 state and disk use, for ``parley index stats``."""
    own = store is None
    store = store or open_passages(settings)
    try:
        manifest = read_manifest(settings)
        return {
            "passages": store.count(),
            "collection": settings.collection,
            "vector_size": store.dim(),
            "embedding_model": manifest.get("embedding_model", settings.model_name),
            "encoder": manifest.get("encoder", settings.encoder),
            "store": store.location,
            "store_mode": "embedded" if store.embedded else "server",
            "store_engine": manifest.get("store_engine"),
            "store_disk_bytes": store.disk_bytes(),
            "bm25_index": str(settings.bm25_dir) if bm25_index_exists(settings.bm25_dir) else None,
            "bm25_docs": (manifest.get("bm25") or {}).get("docs"),
            "bm25_disk_bytes": dir_size(settings.bm25_dir),
            "corpora": manifest.get("corpora", {}),
            "outdated": outdated_index_hint(settings),
        }
    finally:
        if own:
            store.close()


def checkpoint_status(settings: RetrieverSettings, corpus: str) -> dict[str, Any] | None:
    """The unfinished build of ``corpus``, if any (for the CLI's 'continuing after …' line)."""
    path = checkpoint_path(settings, corpus)
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return None if data.get("done") else data

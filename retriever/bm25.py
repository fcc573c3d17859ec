"""Sparse retrieval: a pyserini (Lucene) BM25 index over the same passages as the dense collection.

Every JVM call runs on one dedicated thread: pyjnius must attach each calling thread to the JVM, and
one thread keeps that simple and safe; a BM25 query takes ~2 ms, so a single lane is no bottleneck.
The index stores only passage ids; texts come from the dense collection (one source of truth).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from services.jvm import import_pyserini_indexer, import_pyserini_searcher, pyserini_available


def bm25_index_exists(index_dir: Path) -> bool:
    """A Lucene index is there when its commit point (``segments_N``) is."""
    return index_dir.is_dir() and any(p.name.startswith("segments_") for p in index_dir.iterdir())


class Bm25Index:
    """Lazily opened ``LuceneSearcher`` with BM25 (k1=0.9, b=0.4, pyserini's defaults for passages)."""

    def __init__(self, index_dir: Path) -> None:
        self.index_dir = index_dir
        self._searcher: Any = None
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-jvm")

    @staticmethod
    def available(index_dir: Path) -> bool:
        return pyserini_available() and bm25_index_exists(index_dir)

    def _open(self) -> Any:
        with self._lock:
            if self._searcher is None:
                searcher_cls = import_pyserini_searcher()
                self._searcher = searcher_cls(str(self.index_dir))
            return self._searcher

    @property
    def is_open(self) -> bool:
        """Whether pyserini is imported and the searcher open (the first use imports transformers)."""
        return self._searcher is not None

    def warm(self) -> None:
        """Start the JVM and open the index now (first start ~1-10 s) instead of on the first query."""
        self._executor.submit(self._open).result()

    def _search_sync(self, query: str, k: int) -> list[tuple[str, float]]:
        searcher = self._open()
        return [(str(h.docid), float(h.score)) for h in searcher.search(query, k=k)]

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """Top-k (passage id, BM25 score), best first."""
        if k <= 0:
            return []
        return self._executor.submit(self._search_sync, query, k).result()

    async def asearch(self, query: str, k: int) -> list[tuple[str, float]]:
        if k <= 0:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._search_sync, query, k)

    def close(self) -> None:
        def _close() -> None:
            if self._searcher is not None:
                self._searcher.close()
                self._searcher = None

        self._executor.submit(_close).result()
        self._executor.shutdown(wait=True)


def build_bm25_index(
    index_dir: Path,
    docs: Iterable[tuple[str, str]],
    *,
    threads: int = 1,
    batch: int = 2000,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """(Re)build the BM25 index from ``(id, contents)`` pairs; returns the number of documents.

    Builds into a sibling folder and swaps it in at the end, so a failed build never leaves a half
    index where the service would open it.
    """
    indexer_cls = import_pyserini_indexer()
    tmp = index_dir.with_name(index_dir.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    indexer = indexer_cls(str(tmp), threads=threads)
    n = 0
    buf: list[dict[str, str]] = []
    try:
        for doc_id, contents in docs:
            buf.append({"id": doc_id, "contents": contents})
            if len(buf) >= batch:
                indexer.add_batch_dict(buf)
                n += len(buf)
                if on_batch:
                    on_batch(len(buf))
                buf = []
        if buf:
            indexer.add_batch_dict(buf)
            n += len(buf)
            if on_batch:
                on_batch(len(buf))
    finally:
        indexer.close()
    old = index_dir.with_name(index_dir.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if index_dir.exists():
        os.replace(index_dir, old)
    os.replace(tmp, index_dir)
    shutil.rmtree(old, ignore_errors=True)
    return n

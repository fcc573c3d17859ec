"""Sparse retrieval: an Anserini (Lucene) BM25 index over the same passages as the dense collection.

Parley calls Anserini's Java classes through pyjnius (``retriever.jvm``), the same calls pyserini's
``LuceneSearcher``, ``LuceneIndexer``, ``Analyzer`` and ``querybuilder`` make, without importing pyserini's
Python package (which imports scipy, torch, transformers and pandas): scores and rankings are the same.

Every JVM call runs on one dedicated thread: pyjnius must attach each calling thread to the JVM, and
one thread keeps that simple and safe; a BM25 query takes ~2 ms, so a single lane is no bottleneck.
The index stores only passage ids; texts come from the dense collection (one source of truth).

Query text is never parsed as Lucene query syntax: Anserini analyzes it into terms (bag of words), so
quotes, colons, parentheses or a trailing backslash are just characters. Two things still refused a
query before, and are handled here: lone surrogates (the JVM cannot encode them; replaced by U+FFFD)
and more distinct terms than Lucene's clause limit (a long search text; the query is then built from
its first ``MAX_QUERY_TERMS`` distinct terms, the question's first).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from retriever.corpus import Passage
from retriever.jvm import java_class, lucene_indexer_class, lucene_searcher_class, pyserini_available
from retriever.query_text import clean_text

# Lucene's default IndexSearcher.maxClauseCount: Anserini turns each distinct query term into a clause.
MAX_QUERY_TERMS = 1024
# Anserini's field for the analyzed text (``Constants.CONTENTS``) and the stemmer of its default analyzer.
CONTENTS_FIELD = "contents"
STEMMER = "porter"


def bm25_index_exists(index_dir: Path) -> bool:
    """A Lucene index is there when its commit point (``segments_N``) is."""
    return index_dir.is_dir() and any(p.name.startswith("segments_") for p in index_dir.iterdir())


class Bm25Index:
    """Lazily opened Anserini ``SimpleSearcher``: BM25 with k1=0.9, b=0.4 (its defaults, which pyserini's
    ``LuceneSearcher`` keeps) and the default English analyzer (Porter stemming, stopwords)."""

    def __init__(self, index_dir: Path) -> None:
        self.index_dir = index_dir
        self._searcher: Any = None
        self._analyzer: Any = None  # Java: Anserini's DefaultEnglishAnalyzer, then AnalyzerUtils
        self._analyzer_utils: Any = None
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-jvm")

    @staticmethod
    def available(index_dir: Path) -> bool:
        return pyserini_available() and bm25_index_exists(index_dir)

    def _open(self) -> Any:
        with self._lock:
            if self._searcher is None:
                # What LuceneSearcher(index_dir) does, less the unused second reader it opens.
                self._searcher = lucene_searcher_class()(str(self.index_dir))
            return self._searcher

    @property
    def is_open(self) -> bool:
        """Whether the searcher is open (the first use starts the JVM)."""
        return self._searcher is not None

    def warm(self) -> None:
        """Start the JVM and open the index now (first start ~1-10 s) instead of on the first query."""
        self._executor.submit(self._open).result()

    def _search_sync(self, query: str, k: int) -> list[tuple[str, float]]:
        searcher = self._open()
        text = clean_text(query)
        # Each term takes at least one character, so a short text cannot reach the clause limit and is
        # searched exactly as before; a longer one is analyzed first.
        q = text if len(text) <= MAX_QUERY_TERMS else self._bounded_query(text)
        return [(str(h.docid), float(h.score)) for h in searcher.search(q, int(k))]

    def _bounded_query(self, text: str) -> Any:
        """``text`` itself when its distinct terms fit Lucene's clause limit, else the query Anserini
        would build from it (one clause per distinct term, boosted by its count: its
        BagOfWordsQueryGenerator) over its first ``MAX_QUERY_TERMS`` distinct terms.

        The Java calls are pyserini's: ``Analyzer(get_lucene_analyzer()).analyze`` and its
        ``querybuilder`` (boolean query builder, SHOULD clauses of boosted term queries)."""
        if self._analyzer is None:
            english = java_class("io.anserini.analysis.DefaultEnglishAnalyzer")
            self._analyzer = english.newStemmingInstance(STEMMER)  # the searcher's default: Porter, stopwords
            self._analyzer_utils = java_class("io.anserini.analysis.AnalyzerUtils")
        counts = Counter(
            self._analyzer_utils.analyze(self._analyzer, text).toArray()
        )  # first occurrence order
        if len(counts) <= MAX_QUERY_TERMS:
            return text
        utils = java_class("io.anserini.search.query.QueryGeneratorUtils")
        term_cls = java_class("org.apache.lucene.index.Term")
        term_query = java_class("org.apache.lucene.search.TermQuery")
        boost_query = java_class("org.apache.lucene.search.BoostQuery")
        builder = utils.getBooleanQueryBuilder()
        should = utils.getBooleanClauseShould()  # BooleanClause.Occur.SHOULD
        for term, n in list(counts.items())[:MAX_QUERY_TERMS]:
            builder.add(boost_query(term_query(term_cls(CONTENTS_FIELD, term)), float(n)), should)
        return builder.build()

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


class Bm25Writer:
    """The BM25 index written in the same pass as the dense store, committed with each batch.

    It writes into ``<bm25_dir>.building`` and swaps it in by ``publish()`` at the end of a build, so the
    service never opens a half-built index. A build that continues after a crash reopens that folder in
    append mode; ``add(..., replace=True)`` first deletes the batch's ids, which the last Lucene commit
    may already hold. Extending an index with another corpus starts from a copy of the current one.

    Every JVM call runs on one dedicated thread (as for searches); ``add`` returns a future, so Lucene
    indexes a batch (on its own threads, outside the GIL) while the caller writes the dense store.
    """

    def __init__(
        self, index_dir: Path, *, threads: int = 2, resume: bool, drop_prefix: str | None = None
    ) -> None:
        self.index_dir = index_dir
        self.building = index_dir.with_name(index_dir.name + ".building")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-lucene")
        self._executor.submit(self._open, threads, resume, drop_prefix).result()

    def _open(self, threads: int, resume: bool, drop_prefix: str | None) -> None:
        indexer_cls = lucene_indexer_class()  # prepares the JVM before jnius is imported
        if not (resume and bm25_index_exists(self.building)):
            shutil.rmtree(self.building, ignore_errors=True)
            if bm25_index_exists(self.index_dir):
                shutil.copytree(self.index_dir, self.building)
        self.building.parent.mkdir(parents=True, exist_ok=True)
        append = bm25_index_exists(self.building)
        # What LuceneIndexer(dir, append=..., threads=...) does (its Jackson ObjectMapper is unused here).
        self._indexer = indexer_cls(str(self.building), append, int(threads))
        self._writer = self._indexer.writer  # SimpleIndexer's (private) Lucene IndexWriter
        self._term = java_class("org.apache.lucene.index.Term")
        self._term_query = java_class("org.apache.lucene.search.TermQuery")
        if drop_prefix and append and not resume:
            prefix_query = java_class("org.apache.lucene.search.PrefixQuery")
            self._writer.deleteDocuments(prefix_query(self._term("id", drop_prefix)))
            self._writer.commit()

    def _add(self, passages: Sequence[Passage], replace: bool) -> None:
        if replace:
            for p in passages:
                self._writer.deleteDocuments(self._term_query(self._term("id", p.id)))
        # Raw JSON strings: one JNI call for the batch, parsed and indexed by Lucene's own threads
        # (a Java object per document built from Python costs ~4x more).
        self._indexer.addRawDocuments([json.dumps({"id": p.id, "contents": p.contents()}) for p in passages])

    def add(self, passages: Sequence[Passage], *, replace: bool) -> Future[None]:
        """Index a batch on the JVM thread; the future ends when Lucene has it (not yet committed)."""
        return self._executor.submit(self._add, list(passages), replace)

    def commit(self) -> None:
        self._executor.submit(self._writer.commit).result()

    def docs(self) -> int:
        return int(self._executor.submit(lambda: self._writer.getDocStats().numDocs).result())

    def publish(self) -> int:
        """Close the writer and swap the finished index in; returns its number of documents."""
        n = self.docs()
        self._executor.submit(self._indexer.close).result()
        self._executor.shutdown(wait=True)
        old = self.index_dir.with_name(self.index_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if self.index_dir.exists():
            os.replace(self.index_dir, old)
        os.replace(self.building, self.index_dir)
        shutil.rmtree(old, ignore_errors=True)
        return n

    def close(self) -> None:
        """Stop without publishing: uncommitted documents are dropped (``rollback``), so the index
        holds exactly its last commit, which the build's checkpoint accounts for; the build continues
        from ``.building`` next time."""
        self._executor.submit(self._writer.rollback).result()
        self._executor.shutdown(wait=True)

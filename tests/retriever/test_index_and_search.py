"""Index build on a slice of the real bundled corpus; dense, BM25 and hybrid find the right article."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retriever.corpus import read_jsonl
from retriever.embedder import Embedder
from retriever.indexer import build_index, ensure_index, index_ready, index_stats
from retriever.search import rrf_fuse
from retriever.settings import RetrieverSettings
from tests.retriever.support import KNOWN_QUESTIONS, SLICE_TITLES

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_rrf_rewards_agreement_between_rankings() -> None:
    fused = rrf_fuse([["a", "b", "c"], ["d", "b", "e"]], k=60)
    order = [d for d, _ in fused]
    # b is 2nd in both lists, so it beats a and d, each 1st in one list only.
    assert order[0] == "b"
    assert set(order) == {"a", "b", "c", "d", "e"}
    assert fused[0][1] == pytest.approx(2 / 62)
    assert dict(fused)["a"] == pytest.approx(1 / 61)


def test_stats_after_build(built_index: Path) -> None:
    s = RetrieverSettings(data_dir=built_index)
    st = index_stats(s)
    assert st["passages"] >= len(SLICE_TITLES)
    assert st["vector_size"] == 384
    assert st["embedding_model"] == "all-MiniLM-L6-v2"
    assert st["bm25_docs"] == st["passages"]
    assert st["store_disk_bytes"] > 0 and st["bm25_disk_bytes"] > 0
    assert index_ready(s)


def test_rebuild_is_idempotent_and_added_corpus_extends(
    index_copy: RetrieverSettings, embedder: Embedder, tmp_path: Path
) -> None:
    from retriever.corpus import read_vital

    before = index_stats(index_copy)["passages"]
    again = list(read_vital(100, titles=SLICE_TITLES))
    build_index(index_copy, again, corpus="vital", progress=False, embedder=embedder)
    st = index_stats(index_copy)
    assert st["passages"] == before and st["bm25_docs"] == before  # the corpus replaced, not duplicated

    extra = tmp_path / "extra.jsonl"
    extra.write_text(
        json.dumps({"id": "z1", "contents": "Zorblax\nZorblax is a fictional moon of the planet Quuxar."})
        + "\n",
        encoding="utf-8",
    )
    build_index(index_copy, read_jsonl(extra), corpus="extra", progress=False, embedder=embedder)
    st = index_stats(index_copy)
    assert st["passages"] == before + 1
    assert st["bm25_docs"] == before + 1  # BM25 extended in the same pass, both cover the same passages
    assert set(st["corpora"]) == {"vital", "extra"}


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
async def test_each_mode_finds_the_right_article(runtime: object, mode: str) -> None:
    from retriever.runtime import RetrieverRuntime

    assert isinstance(runtime, RetrieverRuntime)
    found = 0
    for question, title in KNOWN_QUESTIONS:
        hits = await runtime.wiki.search(question, 3, mode)  # type: ignore[arg-type]
        assert len(hits) == 3
        assert hits[0].score >= hits[-1].score
        found += any(h.title == title for h in hits)
    # Every mode must place the answer article in its top 3 for (nearly) every known question.
    assert found >= len(KNOWN_QUESTIONS) - 1, f"{mode}: {found}/{len(KNOWN_QUESTIONS)}"


async def test_default_mode_is_hybrid_when_bm25_exists(runtime: object) -> None:
    from retriever.runtime import RetrieverRuntime

    assert isinstance(runtime, RetrieverRuntime)
    assert runtime.wiki.has_bm25
    assert runtime.wiki.default_mode() == "hybrid"
    hits = await runtime.wiki.search("who painted the mona lisa", 1)
    assert hits[0].title == "Mona Lisa"


def test_ensure_index_is_a_quick_noop_when_built(built_index: Path) -> None:
    import time

    s = RetrieverSettings(data_dir=built_index)
    t = time.perf_counter()
    ensure_index(s, progress=False)
    assert time.perf_counter() - t < 0.5


def test_ensure_index_builds_when_missing(tmp_path: Path) -> None:
    s = RetrieverSettings(data_dir=tmp_path / "fresh", warmup=False)
    assert not index_ready(s)
    ensure_index(s, progress=False, limit=3)
    assert index_ready(s)
    st = index_stats(s)
    assert st["passages"] >= 3 and st["bm25_docs"] == st["passages"]

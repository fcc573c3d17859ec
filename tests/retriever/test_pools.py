"""SKPool assembly: Wikipedia first, numbering, dedupe, caching, TTL, single flight, web faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from retriever.embedder import Embedder
from retriever.pools import InvalidRequest, _Candidate, dedupe, normalize_question
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings
from retriever.websearch import SearxngSearch
from tests.retriever.support import WEB_RESULTS, ReplayServer, searxng_body

pytestmark = [pytest.mark.integration]

Opener = Callable[..., Any]


@pytest.fixture
async def open_rt(index_copy: RetrieverSettings, embedder: Embedder) -> AsyncIterator[Opener]:
    """Open a runtime on the private index copy with extra settings and an optional web provider."""
    opened: list[RetrieverRuntime] = []

    def _open(web: Any = None, **overrides: Any) -> RetrieverRuntime:
        s = index_copy.model_copy(update=overrides)
        rt = RetrieverRuntime.open(s, embedder=embedder, web=web)
        opened.append(rt)
        return rt

    yield _open
    for rt in opened:
        await rt.aclose()


def test_normalized_question_ignores_case_space_and_trailing_punctuation() -> None:
    assert normalize_question("  Who painted   the Mona Lisa?? ") == normalize_question(
        "who painted the mona lisa"
    )


def test_dedupe_drops_same_url_web_results_and_near_identical_embeddings() -> None:
    v = np.array([1.0, 0.0], dtype=np.float32)
    w = np.array([0.0, 1.0], dtype=np.float32)
    near = np.array([0.99, 0.141], dtype=np.float32)
    near /= np.linalg.norm(near)
    cands = [
        _Candidate("wikipedia", "A", "a1", "https://en.wikipedia.org/wiki/A", 1, v),
        _Candidate("wikipedia", "A", "a2", "https://en.wikipedia.org/wiki/A", 1, w),  # same article, distinct
        _Candidate("web", "A - Wikipedia", "x", "https://en.m.wikipedia.org/wiki/A/", 1, None),  # same URL
        _Candidate("web", "copy", "y", "https://copy.example/a", 1, near),  # cosine ≈ 0.99 with a1
        _Candidate("web", "other", "z", "https://other.example/", 1, None),
    ]
    kept = dedupe(cands, 0.95)
    assert [c.text for c in kept] == ["a1", "a2", "z"]


async def test_wikipedia_only_pool_numbered_with_warning(open_rt: Opener) -> None:
    rt = open_rt()
    pool = await rt.pools.build_pool("Who painted the Mona Lisa?", k_wiki=5, k_web=5)
    assert [it.n for it in pool.items] == list(range(1, len(pool.items) + 1))
    assert 1 <= len(pool.items) <= 5 and all(it.source == "wikipedia" for it in pool.items)
    assert pool.items[0].title == "Mona Lisa"
    assert any("no web search provider" in w for w in pool.warnings)
    assert not pool.cached and pool.timings_ms["total_ms"] > 0


async def test_pool_with_web_results_wiki_first_deduped(open_rt: Opener) -> None:
    # The first web result is the Mona Lisa Wikipedia article, which the wiki passages already cover (same
    # URL); the second repeats a wiki passage verbatim (cosine 1.0). Both must be dropped.
    from retriever.corpus import read_vital

    mona_text = next(p.text for p in read_vital(100, titles=["Mona Lisa"]))
    results = [*WEB_RESULTS, ("Copy site", mona_text, "https://copy.example/mona")]
    with ReplayServer(lambda m, p, b: (200, searxng_body(results), 0)) as web_srv:
        rt = open_rt(web=SearxngSearch(web_srv.url, timeout_s=5))
        pool = await rt.pools.build_pool("who painted the mona lisa", k_wiki=3, k_web=4)
    sources = [it.source for it in pool.items]
    assert sources == sorted(sources, key=lambda s: s != "wikipedia")  # wikipedia first
    assert sources.count("wikipedia") == 3
    web = [it for it in pool.items if it.source == "web"]
    urls = [it.url for it in web]
    assert "https://en.wikipedia.org/wiki/Mona_Lisa" not in urls
    assert "https://copy.example/mona" not in urls
    assert "https://www.louvre.fr/en/explore/the-palace/mona-lisa" in urls
    assert [it.n for it in pool.items] == list(range(1, len(pool.items) + 1))
    assert pool.warnings == []
    # Only the title and the snippet enter the pool.
    louvre = next(it for it in web if "louvre" in (it.url or ""))
    assert louvre.title == "Mona Lisa | Louvre" and louvre.text.startswith("Leonardo's portrait")


async def test_cache_hit_returns_same_pool_and_get_by_id(open_rt: Opener) -> None:
    rt = open_rt()
    first = await rt.pools.build_pool("What is the capital of Japan?", 4, 0)
    second = await rt.pools.build_pool("what is the capital of japan", 4, 0)
    assert second.cached and second.pool_id == first.pool_id
    assert [i.model_dump() for i in second.items] == [i.model_dump() for i in first.items]
    other = await rt.pools.build_pool("what is the capital of japan", 3, 0)  # other parameters
    assert other.pool_id != first.pool_id and not other.cached
    stored = await rt.pools.get_pool(first.pool_id)
    assert stored is not None and [i.text for i in stored.items] == [i.text for i in first.items]
    assert rt.pools.builds == 2


async def test_ttl_expiry_rebuilds_and_sweep_deletes(open_rt: Opener) -> None:
    rt = open_rt(pool_ttl_s=0.5)
    first = await rt.pools.build_pool("which planet is the red planet", 3, 0)
    assert (await rt.pools.build_pool("which planet is the red planet", 3, 0)).cached
    await asyncio.sleep(0.7)
    assert await rt.pools.get_pool(first.pool_id) is None  # expired pools are gone for readers
    rebuilt = await rt.pools.build_pool("which planet is the red planet", 3, 0)
    assert not rebuilt.cached and rebuilt.pool_id != first.pool_id
    removed = rt.pools.sweep(now=time.time())
    # The first pool's items and header; its cache entry was re-pointed (and refreshed) by the rebuild.
    assert removed == len(first.items) + 1
    assert await rt.pools.get_pool(rebuilt.pool_id) is not None  # fresh pool survives the sweep


async def test_concurrent_requests_build_once(open_rt: Opener) -> None:
    rt = open_rt()
    pools = await asyncio.gather(*(rt.pools.build_pool("who discovered penicillin", 5, 0) for _ in range(8)))
    assert len({p.pool_id for p in pools}) == 1
    assert rt.pools.builds == 1
    assert sum(not p.cached for p in pools) == 1
    stored = await rt.pools.get_pool(pools[0].pool_id)
    assert stored is not None and len(stored.items) == len(pools[0].items)


async def test_write_behind_pool_is_served_before_and_after_the_save(open_rt: Opener) -> None:
    rt = open_rt()
    pool = await rt.pools.build_pool("who developed the theory of relativity", 3, 0)
    # Right after the response the pool may still be in the save queue: GET finds it either way.
    assert (await rt.pools.get_pool(pool.pool_id)) is not None
    rt.pools.flush()
    on_disk = rt.pools.pools.get(pool.pool_id)  # straight from Qdrant, not the in-memory queue
    assert on_disk is not None and [i.text for i in on_disk.items] == [i.text for i in pool.items]
    assert rt.pools.pools.lookup(rt.pools.cache_key(pool.question, 3, 0)) is not None


@pytest.mark.parametrize(
    "fault",
    [
        (503, {"error": "upstream"}, 0.0),  # 5xx
        (200, "<html>not json", 0.0),  # malformed JSON
        (200, {"results": "nope"}, 0.0),  # JSON of the wrong shape
        (200, {"results": []}, 2.0),  # slower than the timeout
    ],
    ids=["5xx", "malformed", "wrong-shape", "timeout"],
)
async def test_web_fault_still_returns_wikipedia_pool_with_warning(open_rt: Opener, fault: Any) -> None:
    with ReplayServer(lambda m, p, b: fault) as web_srv:
        rt = open_rt(web=SearxngSearch(web_srv.url, timeout_s=0.5))
        pool = await rt.pools.build_pool("who painted the mona lisa", 3, 5)
        assert [it.source for it in pool.items] == ["wikipedia"] * 3
        assert len(pool.warnings) == 1 and "searxng" in pool.warnings[0]
        # Degraded pools are not cached: the next request asks the provider again.
        again = await rt.pools.build_pool("who painted the mona lisa", 3, 5)
        assert not again.cached
        # The client may give up (the timeout case) before the server's thread has read the request:
        # on a loaded machine it is recorded a moment after build_pool returns.
        for _ in range(100):  # at most 5 s
            if len(web_srv.requests) >= 2:
                break
            await asyncio.sleep(0.05)
        assert len(web_srv.requests) == 2


async def test_invalid_inputs_rejected(open_rt: Opener) -> None:
    rt = open_rt()
    for q, kw, kweb in [("", 5, 5), ("   ", 5, 5), ("x" * 5000, 5, 5), ("ok", 51, 5), ("ok", 5, -1)]:
        with pytest.raises(InvalidRequest):
            await rt.pools.build_pool(q, kw, kweb)


async def test_k_zero_gives_empty_pool(open_rt: Opener) -> None:
    rt = open_rt()
    pool = await rt.pools.build_pool("who painted the mona lisa", 0, 0)
    assert pool.items == [] and pool.warnings == []
    assert (await rt.pools.get_pool(pool.pool_id)) is not None


# -- search_text: a passage the debate's model wrote, searched after the question ----------------------

VAGUE = "which one is it"
EVEREST = (
    "Mount Everest is the highest mountain on Earth above sea level, in the Himalayas of Nepal and Tibet."
)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
async def test_search_text_is_searched_after_the_question(open_rt: Opener, mode: str) -> None:
    """Each first-stage search gets the question followed by the search text; the pool's question
    stays the question."""
    rt = open_rt(default_mode=mode)
    plain = await rt.pools.build_pool(VAGUE, 3, 0)
    pool = await rt.pools.build_pool(VAGUE, 3, 0, search_text=EVEREST)
    assert pool.items[0].title == "Mount Everest"
    assert "Mount Everest" not in [it.title for it in plain.items]
    assert pool.question == VAGUE and pool.pool_id != plain.pool_id and not pool.cached


async def test_both_searches_receive_the_question_then_the_search_text(open_rt: Opener) -> None:
    rt = open_rt(default_mode="hybrid")
    seen: dict[str, list[str]] = {"dense": [], "bm25": []}
    assert rt.wiki.bm25 is not None
    bm25_search, embed = rt.wiki.bm25.asearch, rt.wiki.embed_query

    async def spy_bm25(query: str, k: int) -> list[tuple[str, float]]:
        seen["bm25"].append(query)
        return await bm25_search(query, k)

    async def spy_embed(text: str) -> np.ndarray:
        seen["dense"].append(text)
        return await embed(text)

    rt.wiki.bm25.asearch = spy_bm25
    rt.wiki.embed_query = spy_embed
    await rt.pools.build_pool("Who painted the Mona Lisa?", 3, 0, search_text="  Leonardo\n da Vinci  ")
    assert seen == {
        "dense": ["Who painted the Mona Lisa? Leonardo da Vinci"],
        "bm25": ["Who painted the Mona Lisa? Leonardo da Vinci"],
    }


async def test_search_text_is_part_of_the_cache_key(open_rt: Opener) -> None:
    rt = open_rt()
    first = await rt.pools.build_pool(VAGUE, 3, 0, search_text=EVEREST)
    same = await rt.pools.build_pool(VAGUE, 3, 0, search_text=EVEREST)
    assert same.cached and same.pool_id == first.pool_id
    assert same.model_dump(exclude={"cached", "timings_ms"}) == first.model_dump(
        exclude={"cached", "timings_ms"}
    )
    other = await rt.pools.build_pool(
        VAGUE, 3, 0, search_text="The Mona Lisa was painted by Leonardo da Vinci."
    )
    alone = await rt.pools.build_pool(VAGUE, 3, 0)
    assert not other.cached and not alone.cached
    assert len({first.pool_id, other.pool_id, alone.pool_id}) == 3
    assert rt.pools.builds == 3
    # Only the text searched counts: spacing the encoders and BM25 ignore gives the same pool.
    spaced = await rt.pools.build_pool(VAGUE, 3, 0, search_text=f"  {EVEREST.replace(' ', '  ')}\n")
    assert spaced.cached and spaced.pool_id == first.pool_id
    # A blank search text is no search text.
    assert (await rt.pools.build_pool(VAGUE, 3, 0, search_text="  \n ")).pool_id == alone.pool_id
    # And stored pools come back under the same key after the write-behind save.
    rt.pools.flush()
    assert rt.pools.pools.lookup(rt.pools.cache_key(VAGUE, 3, 0, None, EVEREST)) is not None


HOSTILE_SEARCH_TEXTS = [
    'Mona Lisa "painted by" title:Leonardo (da Vinci) AND NOT -Raphael +Louvre~2 ^3 [1 TO 5] {x} /re/ \\',
    "\\",
    '"',
    "((((",
    "*:*",
    "Mona Lisa \ud800 lone surrogate \udfff",
    "painter " + " ".join(f"t{i}" for i in range(900)),  # > 1,024 distinct terms with the question
    "x" * 4000,
    "中" + "".join(chr(0x4E00 + i) for i in range(3999)),  # 4,000 characters, each a term of its own
]


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
@pytest.mark.parametrize("text", HOSTILE_SEARCH_TEXTS, ids=range(len(HOSTILE_SEARCH_TEXTS)))
async def test_hostile_search_text_is_searched_as_plain_text(open_rt: Opener, mode: str, text: str) -> None:
    rt = open_rt(default_mode=mode)
    question = "who painted the mona lisa " + " ".join(f"q{i}" for i in range(300))
    pool = await rt.pools.build_pool(question[:2000], 3, 0, search_text=text[:4000])
    assert len(pool.items) == 3


async def test_more_distinct_terms_than_lucene_takes_keep_the_first_ones(open_rt: Opener) -> None:
    """Past Lucene's clause limit the BM25 query is built from the first 1,024 distinct terms (the
    question's first), as Anserini would build it from the whole text; below it, the text itself."""
    rt = open_rt(default_mode="bm25")
    bm25 = rt.wiki.bm25
    assert bm25 is not None
    await rt.pools.build_pool("who painted the mona lisa", 1, 0)  # opens the searcher
    few = "who painted the mona lisa " + " ".join(f"t{i}" for i in range(300))
    many = "who painted the mona lisa " + " ".join(f"t{i}" for i in range(1500))
    assert bm25._executor.submit(bm25._bounded_query, few).result() == few
    assert not isinstance(bm25._executor.submit(bm25._bounded_query, many).result(), str)
    hits = await bm25.asearch(many, 3)
    assert hits and hits[0][0].startswith("vital:Mona Lisa")


async def test_search_text_over_the_limit_is_refused(open_rt: Opener) -> None:
    rt = open_rt(max_search_text_chars=4000)
    with pytest.raises(InvalidRequest, match="search_text is 4001 characters; the limit is 4000"):
        await rt.pools.build_pool("who painted the mona lisa", 3, 0, search_text="x" * 4001)
    assert rt.pools.builds == 0

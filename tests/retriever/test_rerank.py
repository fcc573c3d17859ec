"""The second ranking stage on the real all-mpnet-base-v2 weights: its order, truncation, load failures,
the cache, and the packaged weights' checks."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from retriever.embedder import Embedder
from retriever.rerank import RerankUnavailable
from retriever.runtime import RetrieverRuntime
from retriever.search import rrf_fuse
from retriever.settings import RetrieverSettings
from retriever.weights import (
    PACKAGED_ENCODERS,
    EncoderWeightsError,
    PackagedEncoder,
    assemble,
    resolve_encoder_path,
)
from tests.retriever.support import AppServer, add_second_stage, copy_index

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MPNET = "all-mpnet-base-v2"
QUESTIONS = [
    "Who painted the Mona Lisa?",
    "What is the highest mountain on Earth?",
    "Which mission first landed people on the Moon?",
]


@pytest.fixture(scope="session")
def reranked_index(built_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slice index plus the second stage's collection, encoded by the real mpnet weights."""
    data_dir = copy_index(built_index, tmp_path_factory.mktemp("reranked") / "index")
    add_second_stage(data_dir, MPNET)
    return data_dir


@pytest.fixture
def reranked_settings(reranked_index: Path, tmp_path: Path) -> RetrieverSettings:
    # A short candidate list keeps the independent reference encoding below cheap on two cores.
    return RetrieverSettings(
        data_dir=copy_index(reranked_index, tmp_path / "index"),
        warmup=False,
        rerank_model=MPNET,
        rerank_depth=12,
        rerank_candidates=6,
    )


@pytest.fixture
async def rt(reranked_settings: RetrieverSettings, embedder: Embedder) -> AsyncIterator[RetrieverRuntime]:
    runtime = RetrieverRuntime.open(reranked_settings, embedder=embedder)
    try:
        yield runtime
    finally:
        await runtime.aclose()


async def test_final_order_is_rrf_of_first_stage_and_mpnet_cosine(rt: RetrieverRuntime) -> None:
    """The pool order is exactly the weighted RRF of the first stage's order and an independent mpnet
    ranking of the same candidates, and on some question it differs from the first stage's."""
    from sentence_transformers import SentenceTransformer

    s = rt.settings
    reference = SentenceTransformer(resolve_encoder_path(MPNET, s.encoder_cache_dir), device="cpu")
    changed = 0
    for q in QUESTIONS:
        first = await rt.wiki.search(q, s.rerank_depth, rerank=False)
        final = await rt.wiki.search(q, 10)
        head = [h.pid for h in first]
        extra = await rt.reranker.nearest(await rt.reranker.embed_query(q), s.rerank_candidates)  # type: ignore[union-attr]
        candidates = list(dict.fromkeys([*head, *extra]))
        by_pid = {h.pid: h for h in await rt.wiki._by_pids(candidates, with_vectors=False)}
        texts = [
            f"{by_pid[p].title}. {by_pid[p].text}" if by_pid[p].title else by_pid[p].text for p in candidates
        ]
        vecs = reference.encode([q, *texts], normalize_embeddings=True)
        cos = vecs[1:] @ vecs[0]
        mpnet_order = [candidates[i] for i in np.argsort(-cos, kind="stable")]
        expected = rrf_fuse([head, mpnet_order], k=s.rerank_rrf_k, weights=[s.rerank_first_stage_weight, 1.0])
        assert [h.pid for h in final] == [p for p, _ in expected[:10]], q
        changed += [h.pid for h in final[:5]] != head[:5]
    assert changed >= 1, "the second stage never changed the top 5"


async def test_a_question_longer_than_the_encoders_window_is_cut_not_refused(rt: RetrieverRuntime) -> None:
    words = (
        "Which Italian painter of the Renaissance painted the portrait known as the Mona Lisa " * 30
    ).split()
    question = " ".join(words)[:1990]  # ~330 words: past MiniLM's 256 tokens and mpnet's 384
    pool = await rt.pools.build_pool(question, k_wiki=5, k_web=0)
    assert len(pool.items) >= 1
    assert "rerank_ms" in pool.timings_ms and "rerank_encode_ms" in pool.timings_ms
    assert any("Mona Lisa" in it.title for it in pool.items)


async def test_a_cached_pool_comes_back_unchanged_and_rerank_false_is_its_own_pool(
    rt: RetrieverRuntime,
) -> None:
    q = "Who painted the Mona Lisa?"
    built = await rt.pools.build_pool(q, k_wiki=5, k_web=0)
    again = await rt.pools.build_pool(q, k_wiki=5, k_web=0)
    assert not built.cached and again.cached
    assert again.pool_id == built.pool_id
    assert [i.model_dump() for i in again.items] == [i.model_dump() for i in built.items]
    plain = await rt.pools.build_pool(q, k_wiki=5, k_web=0, rerank=False)
    assert not plain.cached and plain.pool_id != built.pool_id
    assert "rerank_ms" not in plain.timings_ms
    first = await rt.wiki.search(q, 5, rerank=False)
    assert [i.text for i in plain.items] == [h.text for h in first][: len(plain.items)]


def test_a_stage_without_its_vectors_stops_the_start_with_the_command_to_run(
    built_index: Path, tmp_path: Path, embedder: Embedder
) -> None:
    settings = RetrieverSettings(
        data_dir=copy_index(built_index, tmp_path / "index"), warmup=False, rerank_model=MPNET
    )
    with pytest.raises(RerankUnavailable, match=r"parley index build --rerank"):
        RetrieverRuntime.open(settings, embedder=embedder)


def test_an_unknown_second_stage_model_is_a_clear_error(
    built_index: Path, tmp_path: Path, embedder: Embedder
) -> None:
    settings = RetrieverSettings(
        data_dir=copy_index(built_index, tmp_path / "index"), warmup=False, rerank_model="no-such-encoder"
    )
    with pytest.raises(EncoderWeightsError, match="unknown encoder 'no-such-encoder'"):
        RetrieverRuntime.open(settings, embedder=embedder)


@pytest.fixture
def tmp_weights(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "weights"
    shutil.rmtree(tmp_path / "weights", ignore_errors=True)


def test_packaged_weights_are_checked_by_sha256_and_a_missing_part_is_named(tmp_weights: Path) -> None:
    real = PACKAGED_ENCODERS[MPNET]
    corrupt = PackagedEncoder(**{**real.__dict__, "zip_sha256": "0" * 64})
    with pytest.raises(EncoderWeightsError, match="expected 0000"):
        assemble(corrupt, tmp_weights)
    assert not (tmp_weights / MPNET).exists(), "a failed check must leave nothing that looks assembled"
    missing = PackagedEncoder(**{**real.__dict__, "distributions": ("no-such-weights-part-001",)})
    with pytest.raises(EncoderWeightsError, match="missing package no-such-weights-part-001"):
        assemble(missing, tmp_weights)


def test_the_service_reports_its_second_stage_and_honours_rerank_false(
    reranked_settings: RetrieverSettings,
) -> None:
    import httpx

    from retriever.app import create_app

    with (
        AppServer(create_app(reranked_settings)) as srv,
        httpx.Client(base_url=srv.url, timeout=120) as client,
    ):
        health = client.get("/healthz").json()
        assert health["rerank_model"] == MPNET
        on = client.post("/v1/pools", json={"question": "Who wrote Hamlet?", "k_web": 0}).json()
        off = client.post(
            "/v1/pools", json={"question": "Who wrote Hamlet?", "k_web": 0, "rerank": False}
        ).json()
        assert "rerank_ms" in on["timings_ms"] and "rerank_ms" not in off["timings_ms"]
        bad = client.post("/v1/pools", json={"question": "Who wrote Hamlet?", "rerank": "maybe"})
        assert bad.status_code == 422
        assert bad.headers["content-type"].startswith("application/problem+json")


def test_index_stats_shows_the_second_stage_and_whether_it_covers_the_first(
    reranked_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from retriever.cli import index_app

    monkeypatch.setenv("PARLEY_RETRIEVER_RERANK_MODEL", MPNET)
    result = CliRunner().invoke(index_app, ["stats", "--json", "--data-dir", str(reranked_index)])
    assert result.exit_code == 0, result.output
    stage = json.loads(result.output)["rerank"]
    assert stage["model"] == MPNET and stage["covers_first_stage"] is True and stage["passages"] > 0
    text = CliRunner().invoke(index_app, ["stats", "--data-dir", str(reranked_index)])
    assert f"second stage     {MPNET}: {stage['passages']} passages" in text.output

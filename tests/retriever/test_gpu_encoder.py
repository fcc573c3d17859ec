"""The pipelined (GPU) encoder, run on the CPU: its length-bucketed batches give the plain path's vectors.

No GPU here: the same pipeline (parallel tokenization, length buckets, the model on its own thread,
pooling where the model runs) runs with ``device="cpu"``; on a GPU only the device and the precision
change. Small windows and batches make a few dozen bundled passages cross many windows and buckets.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import retriever.gpu_encoder as gpu
from retriever.corpus import read_vital
from retriever.corpus_sources import FileSource
from retriever.embedder import SentenceTransformerEmbedder
from retriever.encoders import make_embedder
from retriever.gpu_encoder import PipelinedEmbedder
from retriever.gpu_tokenize import tokenize_window
from retriever.settings import RetrieverSettings
from retriever.vector_shards import VectorShards, encode_to_shards

pytestmark = pytest.mark.integration

LONG = "Truncation " + "word " * 800  # far past the model's 256 tokens


@pytest.fixture(scope="module")
def texts() -> list[str]:
    passages = [p.embed_text() for p in read_vital(100, limit=20)][:30]
    return [*passages[:10], LONG, "a", *passages[10:]]


@pytest.fixture(scope="module")
def plain(texts: list[str]) -> np.ndarray:
    """sentence-transformers' own encode in fp32: the vectors every encoder must reproduce."""
    return SentenceTransformerEmbedder(threads=1).embed(texts)


def _small(**kw: object) -> PipelinedEmbedder:
    kw = {"device": "cpu", "tokenize_workers": 0, "window": 8, "batch_tokens": 1024, **kw}
    return PipelinedEmbedder(**kw)  # type: ignore[arg-type]


def test_bucketed_fp32_vectors_equal_the_plain_path_in_order(texts: list[str], plain: np.ndarray) -> None:
    enc = _small(precision="fp32")
    try:
        vecs = enc.embed(texts)
    finally:
        enc.close()
    assert vecs.shape == plain.shape and vecs.dtype == np.float32
    cos = (vecs * plain).sum(1)  # row i against row i: the order is the input's
    assert cos.min() >= 0.9999, cos.min()
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    s = enc.stats
    assert s.passages == len(texts) and s.tokenizer_rate > 0 and s.model_rate > 0 and s.rate > 0
    assert "tokenizer" in s.line() and "model" in s.line() and "end to end" in s.summary()
    assert s.padded_tokens >= s.tokens > 0


def test_reduced_precision_stays_within_the_bound_and_is_checked(texts: list[str], plain: np.ndarray) -> None:
    enc = _small(precision="bf16", tokenize_workers=1)  # one tokenizer process, as on a GPU machine
    try:
        vecs = enc.embed(texts)
    finally:
        enc.close()
    assert (vecs * plain).sum(1).min() >= 0.999
    assert enc.stats.precision == "bf16" and not enc.stats.fell_back
    assert enc.stats.precision_cosine is not None and enc.stats.precision_cosine >= 0.999


def test_a_precision_below_the_bound_falls_back_to_fp32(
    texts: list[str], plain: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu, "PRECISION_MIN_COSINE", 1.01)  # no reduced precision can meet it
    enc = _small(precision="bf16")
    vecs = enc.embed(texts[:12])
    assert enc.stats.fell_back and enc.stats.precision == "fp32"
    assert (vecs * plain[:12]).sum(1).min() >= 0.9999


def test_empty_input_and_streamed_chunks(texts: list[str], plain: np.ndarray) -> None:
    enc = _small(precision="fp32")
    assert enc.embed([]).shape == (0, 384)
    parts = list(enc.embed_stream([texts[:5], [], texts[5:]]))
    assert [len(p) for p in parts] == [5, 0, len(texts) - 5]
    assert (np.vstack(parts) * plain).sum(1).min() >= 0.9999


def test_long_texts_are_truncated_and_windows_sorted_into_buckets(texts: list[str]) -> None:
    from retriever.embedder import bundled_model_path

    win = tokenize_window(texts, bundled_model_path(), 256, 0, batch_tokens=2048)
    rows = np.concatenate([b.rows for b in win.batches])
    assert sorted(rows.tolist()) == list(range(len(texts)))
    assert max(int(b.lengths.max()) for b in win.batches) == 256  # the long text, cut at the model's limit
    widths = [b.ids.shape[1] for b in win.batches]
    assert widths == sorted(widths, reverse=True) and all(w % 8 == 0 for w in widths)
    for b in win.batches:  # each batch padded only to its own longest text
        assert b.ids.shape[1] - int(b.lengths.max()) < 8
        assert b.ids.size <= 2048 or len(b.rows) == 1


def test_index_encode_streams_shards_that_match_the_texts(tmp_path: Path, texts: list[str]) -> None:
    tsv = tmp_path / "psgs.tsv"
    rows = [t for t in texts if t != "a"]
    tsv.write_text(
        "id\ttext\ttitle\n" + "".join(f"{i}\t{t.replace(chr(9), ' ')}\tT{i}\n" for i, t in enumerate(rows))
    )
    source = FileSource(tsv, kind="dpr", corpus="t", max_words=1000)
    enc = _small(precision="fp32")
    n = encode_to_shards(source, enc, tmp_path / "shards", shard_size=7, progress=False)
    shards = VectorShards(tmp_path / "shards")
    assert n == shards.total == len(rows)
    # Each shard ends at the first row boundary at or past 7 passages (one passage per row here).
    assert [np.load(f).shape[0] for f in shards.files] == [7] * (n // 7) + ([n % 7] if n % 7 else [])
    expect = enc.embed([p.embed_text() for row in source.rows(0, 0) for p in row.passages])
    assert (shards.take(0, n) * expect).sum(1).min() >= 0.9999
    cp = json.loads((tmp_path / "shards" / "encode.checkpoint.json").read_text())
    assert cp["done"] and cp["passages"] == n and cp["position"] == tsv.stat().st_size


def test_a_gpu_device_gets_the_pipelined_encoder_with_its_settings() -> None:
    s = RetrieverSettings(encoder="onnx-fp32", gpu_precision="bf16", gpu_tokenize_workers=3)
    enc = make_embedder(s, device="cuda")
    assert isinstance(enc, PipelinedEmbedder)
    assert enc.stats.precision == "bf16" and enc.stats.tokenize_workers == 3
    assert enc.dim == 384  # from the model's config, without loading torch


def test_index_build_gives_a_pipelined_encoder_whole_batches_in_this_process(texts: list[str]) -> None:
    from retriever.ingest import BatchEncoder

    enc = _small(precision="fp32")
    batches = BatchEncoder(RetrieverSettings(), enc, workers=2, device="cpu")
    try:
        futures = batches.submit(texts * 12)  # more than the CPU encoders' 256-text chunks
        assert len(futures) == 1
        assert futures[0].result().shape == (len(texts) * 12, 384)
    finally:
        batches.close()

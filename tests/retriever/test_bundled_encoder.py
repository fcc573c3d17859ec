"""The first-stage encoder and vectors that ship inside Parley: the default path encodes with the int8
graph in retriever/data (no torch, no weights package) and builds the bundled index by import."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from retriever import bundled_encoder, shipped_vectors
from retriever.corpus import read_vital
from retriever.encoders import EncoderError, OnnxEmbedder
from retriever.indexer import ensure_index, shipped_shards
from retriever.manifest import read_manifest
from retriever.settings import RetrieverSettings


@pytest.mark.unit
def test_the_shipped_files_are_the_recorded_ones_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    assert bundled_encoder.bundled_encoder_dir() == bundled_encoder.BUNDLED_DIR
    copy = tmp_path / "encoder"
    shutil.copytree(bundled_encoder.BUNDLED_DIR, copy)
    graph = copy / bundled_encoder.GRAPH
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(bundled_encoder.BundledEncoderError, match=r"model-int8\.onnx has sha256 .*reinstall"):
        bundled_encoder.bundled_encoder_dir(copy)
    shutil.copy(bundled_encoder.BUNDLED_DIR / bundled_encoder.GRAPH, graph)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(bundled_encoder.BundledEncoderError, match=r"tokenizer\.json is missing"):
        bundled_encoder.bundled_encoder_dir(copy)


@pytest.mark.unit
def test_the_default_encoder_runs_the_shipped_graph_and_other_precisions_need_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = OnnxEmbedder(cache_dir=tmp_path / "cache", threads=1)
    vecs = default.embed(["The Moon is Earth's only natural satellite.", "Paris is the capital of France."])
    assert vecs.shape == (2, 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert not (tmp_path / "cache").exists()  # nothing exported, nothing written
    # Without torch, an fp32 graph cannot be exported: the message says what to install and what runs.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    fp32 = OnnxEmbedder(cache_dir=tmp_path / "cache", precision="fp32", threads=1)
    with pytest.raises(EncoderError, match=r"needs torch .*make install-torch.*onnx-int8"):
        fp32.embed(["x"])


@pytest.mark.unit
def test_the_shipped_first_stage_vectors_are_the_default_encoders() -> None:
    """A sample of the shipped vectors against the encoder, in the corpus's order.

    The int8 graph quantizes activations per batch (dynamic quantization), so a passage encoded in
    another batch than `parley index encode` put it in agrees to a cosine of about 0.995, not 1, and
    the int8 kernels differ by CPU (AVX-512 VNNI or AVX2 only: down to 0.9895 measured on an AVX2
    machine). The import's own check accepts 0.97; another passage's vector stays below 0.9."""
    shipped = shipped_vectors.find("vital", 100, "all-MiniLM-L6-v2", int8_encoder=True)
    assert shipped is not None
    with np.load(shipped_vectors.HERE / shipped.file) as npz:
        vectors = shipped_vectors.dequantize(npz["codes"], npz["scale"])
    passages = list(read_vital(100))
    assert len(passages) == vectors.shape[0] == shipped.rows
    rows = np.random.default_rng(7).choice(len(passages), size=24, replace=False)
    ours = OnnxEmbedder(threads=1, cache_dir=Path("unused")).embed([passages[i].embed_text() for i in rows])
    cosines = (ours * vectors[rows]).sum(axis=1)
    assert cosines.min() > 0.98, cosines
    # Against other passages' vectors (a misaligned file) the same check fails.
    others = (ours * vectors[(rows + 5000) % len(passages)]).sum(axis=1)
    assert others.max() < 0.9, others


@pytest.mark.unit
def test_only_the_encoder_and_split_that_made_them_find_shipped_vectors(tmp_path: Path) -> None:
    default = RetrieverSettings(data_dir=tmp_path)
    assert shipped_shards(default, "vital") is not None
    assert shipped_shards(default.model_copy(update={"passage_words": 80}), "vital") is None
    assert shipped_shards(default.model_copy(update={"encoder": "onnx-fp32"}), "vital") is None
    assert shipped_shards(default, "dpr") is None


@pytest.mark.slow
def test_a_fresh_data_dir_gets_the_bundled_index_by_import_not_by_encoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the first `parley ask` does: the whole bundled corpus, each batch's first passage re-encoded
    to check it, nothing else encoded."""
    encoded: list[int] = []
    original = OnnxEmbedder.embed

    def counting(self: OnnxEmbedder, texts: Sequence[str]) -> np.ndarray:
        encoded.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(OnnxEmbedder, "embed", counting)
    settings = RetrieverSettings(data_dir=tmp_path / "index", bm25_enabled=False, warmup=False)
    ensure_index(settings, progress=False)
    manifest = read_manifest(settings)
    assert manifest["passages"] == 12373 and manifest["encoder"] == "onnx-int8"
    assert 0 < sum(encoded) < 100, f"{sum(encoded)} texts encoded"


@pytest.mark.slow
def test_the_shipped_graph_is_what_the_export_makes_from_the_weights() -> None:
    """The provenance holds: torch's export and ONNX Runtime's quantization of the weights package give
    the shipped graph byte for byte (the torch extra, which `make test` installs)."""
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed: `make test` installs the torch extra (make install-dev)")
    assert bundled_encoder.export_and_compare()


@pytest.mark.integration
@pytest.mark.slow
def test_parley_index_build_imports_the_shipped_vectors_of_the_bundled_corpus(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(HF_HUB_OFFLINE="1", PARLEY_RETRIEVER_DATA_DIR=str(tmp_path / "index"))
    done = subprocess.run(
        [sys.executable, "-m", "parley_cli", "index", "build"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "importing the shipped all-MiniLM-L6-v2 vectors of the bundled corpus" in done.stdout
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert manifest["passages"] == 12373 and manifest["bm25"]["docs"] == 12373

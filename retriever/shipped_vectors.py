"""Precomputed passage vectors of the bundled corpus, shipped with the package.

Encoding the 12,373 Vital passages takes about 2.5 minutes on two CPU cores with the first-stage
all-MiniLM-L6-v2 and 20-60 minutes with a second stage's encoder, which would turn a fresh clone's first
answer from a minute or two into many. The vectors are computed once by the same encoder
(``parley index encode --out DIR`` with that encoder configured, then ``scripts/pack_vectors.py``) and
shipped as int8 codes with one float32 scale per row (a quarter of the fp32 size; cosine to the
encoder's vectors ≥ 0.996). A build over the bundled corpus imports them like any ``--vectors``
shards: the importer re-encodes the first passage of every batch with the configured encoder and
refuses vectors that do not match their text, and the file's sha256 is checked before anything is read.
A changed corpus, split or encoder finds no shipped file and is encoded as before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.errors import ParleyError

HERE = Path(__file__).resolve().parent / "data"


class ShippedVectorsError(ParleyError):
    """The shipped vectors file is missing or not the recorded one."""


@dataclass(frozen=True)
class ShippedVectors:
    corpus: str
    passage_words: int
    model: str
    file: str  # under retriever/data/
    sha256: str
    rows: int
    # Which collection the vectors are for: the int8 encoder's own (``_int8``) or the fp32 one that the
    # torch and ONNX fp32 encoders share (their vectors agree to 1e-6).
    int8_encoder: bool = False


def _bundled(model: str, file: str, sha256: str, *, int8_encoder: bool = False) -> ShippedVectors:
    """Vectors of the passages Parley bundles: the Vital Articles, 100-word split, 12,373 rows."""
    return ShippedVectors("vital", 100, model, file, sha256, rows=12373, int8_encoder=int8_encoder)


SHIPPED: tuple[ShippedVectors, ...] = (
    # The first-stage encoder, all-MiniLM-L6-v2 as the int8 graph that ships with Parley
    # (PARLEY_RETRIEVER_ENCODER=onnx-int8, the default), packed by scripts/pack_vectors.py.
    _bundled(
        "all-MiniLM-L6-v2",
        "vital-all-MiniLM-L6-v2-onnx-int8.int8.npz",
        "8096b9af53d1626f427241598d93cad992abe7eef00f197092fa7974e8841c56",
        int8_encoder=True,
    ),
    # all-mpnet-base-v2, fp32 (sentence-transformers on torch, equal to the ONNX fp32 encoder to 1e-6),
    # packed by scripts/pack_vectors.py: worst cosine to the fp32 vectors 0.99989.
    _bundled(
        "all-mpnet-base-v2",
        "vital-all-mpnet-base-v2.int8.npz",
        "8029e0ce0ee83dac2fd2bd9eec2981696a4d84b63d5779eae53f7936657101ea",
    ),
    # EmbeddingGemma-300M (sentence-transformers on torch, bf16, its document prompt), packed the same
    # way: worst cosine to the encoder's vectors 0.99639.
    _bundled(
        "embeddinggemma-300m",
        "vital-embeddinggemma-300m.int8.npz",
        "401900c67f903f9996141cae159ff06f2c1c037cd5166a25577f34cd829edb1a",
    ),
)


def quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: codes and the scale that brings each row back (row ≈ codes * scale)."""
    scale = np.abs(vectors).max(axis=1) / 127.0
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    codes = np.clip(np.rint(vectors / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def dequantize(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Unit float32 rows again."""
    vecs = codes.astype(np.float32) * scale[:, None]
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return (vecs / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def save(path: Path, vectors: np.ndarray) -> str:
    """Write the int8 file; returns its sha256 (to record in ``SHIPPED``)."""
    codes, scale = quantize(vectors)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        np.savez(fh, codes=codes, scale=scale)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find(corpus: str, passage_words: int, model: str, *, int8_encoder: bool) -> ShippedVectors | None:
    """The shipped vectors for this corpus, split, model and encoder precision, if there are any."""
    for s in SHIPPED:
        wanted = (corpus, passage_words, model, int8_encoder)
        if (s.corpus, s.passage_words, s.model, s.int8_encoder) == wanted:
            return s
    return None


def as_shards(shipped: ShippedVectors, folder: Path) -> Path:
    """A folder with the vectors as one float32 ``.npy`` shard, for ``build_index(vectors=...)``."""
    path = HERE / shipped.file
    if not path.exists():
        raise ShippedVectorsError(f"the shipped vectors {path} are missing: reinstall Parley")
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != shipped.sha256:
        raise ShippedVectorsError(f"{path} has sha256 {actual}, expected {shipped.sha256}: reinstall Parley")
    with np.load(path) as npz:
        vecs = dequantize(npz["codes"], npz["scale"])
    if vecs.shape[0] != shipped.rows:
        raise ShippedVectorsError(f"{path} holds {vecs.shape[0]} rows, expected {shipped.rows}")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.npy"):
        old.unlink()
    np.save(folder / "000000.npy", vecs)
    return folder

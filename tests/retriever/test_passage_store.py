"""The passage collection's scale layout as a Qdrant server receives it (over the real REST protocol,
recorded by a local HTTP server), and the embedded shard's layout and rebuild messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient

from retriever.passage_store import EdgePassageStore, ServerPassageStore, StoreLayout
from retriever.store_port import StoreLocked, VectorStoreError, point_id
from tests.retriever.support import ReplayServer

pytestmark = pytest.mark.unit


def _qdrant(method: str, path: str, raw: bytes) -> tuple[int, Any, float]:
    """Answers in the shapes of Qdrant's REST API for the calls the store makes."""
    ok: dict[str, Any] = {"status": "ok", "time": 0.001}
    if path.endswith("/exists"):
        return 200, {**ok, "result": {"exists": False}}, 0.0
    if "/points/query" in path:
        point = {"id": point_id("a"), "version": 1, "score": 0.9, "payload": {"pid": "a"}}
        return 200, {**ok, "result": {"points": [point]}}, 0.0
    if method == "PUT":
        return 200, {**ok, "result": True}, 0.0
    return 200, {**ok, "result": {"title": "qdrant", "version": "1.15.0"}}, 0.0


def test_server_collection_is_created_with_the_scale_layout_and_searched_with_rescoring() -> None:
    layout = StoreLayout(shard_number=6, replication_factor=2, hnsw_m=24, hnsw_ef=200, oversampling=3.0)
    with ReplayServer(_qdrant) as srv:
        client = QdrantClient(url=srv.url, timeout=5, check_compatibility=False)
        store = ServerPassageStore(client, "wikipedia_x", layout, location=srv.url)
        store.ensure(384)
        hits = store.search(np.ones(384, dtype=np.float32), 5)
    created = next(
        json.loads(raw) for m, p, _, raw in srv.requests if m == "PUT" and p == "/collections/wikipedia_x"
    )
    assert created["vectors"] == {"size": 384, "distance": "Cosine", "on_disk": True}
    assert created["quantization_config"] == {
        "scalar": {"type": "int8", "quantile": 0.99, "always_ram": True}
    }
    assert created["hnsw_config"]["m"] == 24 and created["on_disk_payload"] is True
    assert created["shard_number"] == 6 and created["replication_factor"] == 2
    query = next(json.loads(raw) for m, p, _, raw in srv.requests if p.endswith("/points/query"))
    params = query["params"]
    assert params["hnsw_ef"] == 200 and not params.get("exact")
    assert params["quantization"]["rescore"] is True and params["quantization"]["oversampling"] == 3.0
    assert [h.payload["pid"] for h in hits] == ["a"]


def test_embedded_shard_layout_is_on_disk_with_int8_codes_in_ram(tmp_path: Path) -> None:
    store = EdgePassageStore(tmp_path / "shard", StoreLayout())
    store.ensure(16)
    store.close()
    cfg = json.loads((tmp_path / "shard" / "edge_config.json").read_text())
    assert cfg["vectors"][""] == {"size": 16, "distance": "Cosine", "memory": "cold"}
    assert cfg["payload_memory"] == "cold"
    assert cfg["quantization_config"]["scalar"]["type"] == "int8"
    assert cfg["quantization_config"]["scalar"]["memory"] == "pinned"
    assert cfg["hnsw_config"]["m"] == 16 and cfg["hnsw_config"]["ef_construct"] == 100


def test_embedded_shard_refuses_a_second_opener_and_another_vector_size(tmp_path: Path) -> None:
    first = EdgePassageStore(tmp_path / "shard", StoreLayout())
    first.ensure(16)
    try:
        with pytest.raises(StoreLocked, match="in use by another process"):
            EdgePassageStore(tmp_path / "shard", StoreLayout())
        with pytest.raises(VectorStoreError, match="holds 16-d vectors"):
            first.ensure(384)
    finally:
        first.close()


def test_a_shard_the_engine_cannot_read_gets_a_rebuild_message(tmp_path: Path) -> None:
    (tmp_path / "shard").mkdir()
    (tmp_path / "shard" / "edge_config.json").write_text('{"vectors": "from another version"}')
    with pytest.raises(VectorStoreError, match="rebuild it with `parley index build`"):
        EdgePassageStore(tmp_path / "shard", StoreLayout())


def test_the_pools_sweep_gives_back_the_space_of_what_it_deleted(tmp_path: Path) -> None:
    """An Edge shard only marks deleted points: without a vacuum the pools shard, which deletes every
    pool it ever held, would grow on disk and in memory for as long as the retriever runs."""
    from retriever.pools import PoolStore
    from retriever.store_port import dir_size
    from retriever.stores import POOLS_LAYOUT

    store = EdgePassageStore(tmp_path / "pools", POOLS_LAYOUT)
    pools = PoolStore(store, dim=32, ttl_s=100.0)
    store.ensure(32)
    rng = np.random.default_rng(0)
    sizes = []
    for hour in range(4):  # each round: a batch of pools, then a sweep of the round before
        ids = [point_id(f"{hour}-{i}") for i in range(2000)]
        vectors = rng.standard_normal((2000, 32)).astype(np.float32)
        store.upsert(ids, vectors, [{"created_at": hour * 100.0, "text": "w" * 400} for _ in ids])
        if hour:
            assert pools.sweep(now=hour * 100.0 + 50) == 2000
        store.flush()
        # the segments: the write-ahead log rotates in files of its own capacity and is bounded apart
        sizes.append(dir_size(tmp_path / "pools" / "segments"))
    assert len(store.retrieve([point_id("3-0")])) == 1  # the live pools are still there
    assert store.retrieve([point_id("2-0")]) == []
    # the shard holds one round of live points each time: its size stays near the first round's
    # (without the vacuum: 0.65, 1.28, 1.67, 2.04 MB)
    assert sizes[-1] < 1.3 * sizes[0], sizes
    store.close()

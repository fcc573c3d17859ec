"""Opening the retriever's stores: the passage collection and the knowledge pools, embedded (two Qdrant
Edge shards under ``<data_dir>/edge/``) or on a Qdrant server (one client, two collections)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from retriever.passage_store import EdgePassageStore, ServerPassageStore, StoreLayout
from retriever.settings import RetrieverSettings
from retriever.store_port import Hit, PassageStore, PoolBackend
from retriever.vector_store import VectorStore


class ServerPoolCollection:
    """The pools collection on a Qdrant server, through ``VectorStore`` (payload indexes on the keys)."""

    def __init__(self, store: VectorStore, name: str) -> None:
        self.store = store
        self.name = name

    def ensure(self, dim: int) -> None:
        self.store.ensure_collection(self.name, dim, keyword_indexes=("pool_id", "question_hash"))

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[dict[str, Any]]) -> None:
        self.store.upsert(self.name, ids, vectors, payloads)

    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[Hit]:
        return self.store.retrieve(self.name, ids, with_vectors=with_vectors)

    def delete_where_less(self, field: str, value: float) -> int:
        return self.store.delete_where_less(self.name, field, value)

    def compact(self) -> None:
        """Nothing to do: a Qdrant server's own optimizer vacuums deleted points in the background."""

    def close(self) -> None:
        self.store.close()


def layout_of(settings: RetrieverSettings) -> StoreLayout:
    """The passage collection's layout as the settings ask for it (each ``StoreLayout`` field is the
    ``RetrieverSettings`` field of the same name)."""
    return StoreLayout(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(StoreLayout)})


def _server(settings: RetrieverSettings) -> VectorStore:
    key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    return VectorStore.open(url=settings.qdrant_url, api_key=key)


# The pools shard is small and never searched by vector: no quantization, kept in RAM.
POOLS_LAYOUT = StoreLayout(quantization="none", on_disk=False)


def open_stores(settings: RetrieverSettings) -> tuple[PassageStore, PoolBackend]:
    """The passage collection and the pools' store: both on the Qdrant server when ``qdrant_url`` is
    set (one client), else two embedded Qdrant Edge shards under ``<data_dir>/edge/``."""
    if settings.qdrant_url:
        server = _server(settings)
        passages = ServerPassageStore(
            server.client, settings.collection, layout_of(settings), location=settings.qdrant_url
        )
        return passages, ServerPoolCollection(server, settings.pools_collection)
    passages_store = EdgePassageStore(settings.edge_path, layout_of(settings))
    try:
        return passages_store, EdgePassageStore(settings.pools_path, POOLS_LAYOUT)
    except BaseException:
        passages_store.close()
        raise


def open_passages(settings: RetrieverSettings) -> PassageStore:
    """The passage collection alone (index builds and stats)."""
    if settings.qdrant_url:
        return ServerPassageStore(
            _server(settings).client, settings.collection, layout_of(settings), location=settings.qdrant_url
        )
    return EdgePassageStore(settings.edge_path, layout_of(settings))

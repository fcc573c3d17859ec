"""The store port: what search, pools, rerank and ingestion see of a vector store, with no backend import.

``Hit`` is what every store's search and retrieve return; ``VectorStoreError`` (and ``StoreLocked``)
what they raise; ``PassageStore`` and ``PoolBackend`` the protocols the Qdrant Edge shard
(``retriever.passage_store``) and the Qdrant server (``retriever.vector_store``) implement. An
import-linter contract keeps the modules that only need these off ``qdrant_client`` and ``qdrant_edge``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

# Namespace for deterministic point ids: Qdrant ids must be integers or UUIDs, our ids are strings.
_ID_NAMESPACE = uuid.UUID("5f1c8f4e-6a38-4e0c-9d53-6b8f2f6f4a10")


def point_id(key: str) -> str:
    """A stable UUID for a string key, so re-ingesting the same passage overwrites instead of duplicating."""
    return str(uuid.uuid5(_ID_NAMESPACE, key))


class VectorStoreError(Exception):
    """The store failed or is unreachable; the message says which store."""


class StoreLocked(VectorStoreError):
    """Another process holds the embedded store folder (embedded mode allows one process per folder)."""


@dataclass(frozen=True)
class Hit:
    """One point a store returned: its id, its similarity (0 for a retrieve), its payload, its vector."""

    id: str
    score: float
    payload: dict[str, Any]
    vector: np.ndarray | None = None

    @classmethod
    def of(cls, pid: Any, score: float, payload: Any, vector: Any) -> Hit:
        """A hit from a Qdrant point (server or Edge alike): string id, float score, float32 vector."""
        vec = None if vector is None else np.asarray(vector, dtype=np.float32)
        return cls(id=str(pid), score=float(score), payload=dict(payload or {}), vector=vec)


class PassageStore(Protocol):
    """What the retriever and the index builder need from the passage collection."""

    location: str
    embedded: bool

    def ensure(self, dim: int) -> None: ...
    def dim(self) -> int | None: ...
    def count(self) -> int: ...
    def upsert(self, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[dict[str, Any]]) -> None: ...
    def delete_corpus(self, corpus: str) -> None: ...
    def flush(self) -> None: ...
    def finish(self) -> None: ...
    def search(
        self, vector: np.ndarray, limit: int, *, with_vectors: bool = False, exact: bool = False
    ) -> list[Hit]: ...
    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[Hit]: ...
    def disk_bytes(self) -> int | None: ...
    def close(self) -> None: ...


class PoolBackend(Protocol):
    """Where pools are kept: an embedded Qdrant Edge shard (``EdgePassageStore``) or a collection on a
    Qdrant server (``ServerPoolCollection``)."""

    def ensure(self, dim: int) -> None: ...
    def upsert(self, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[dict[str, Any]]) -> None: ...
    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[Hit]: ...
    def delete_where_less(self, field: str, value: float) -> int: ...
    def compact(self) -> None: ...
    def close(self) -> None: ...


def dir_size(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk (0 when missing), for the stats of an embedded store.

    Allocated blocks, not apparent sizes: Qdrant preallocates sparse files (a 40-passage shard reads as
    136 MB but holds under 1 MB).
    """
    if not path.exists():
        return 0
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())

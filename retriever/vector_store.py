"""A Qdrant server through qdrant-client: the client the retriever shares between the passage
collection (``retriever.passage_store.ServerPassageStore``) and the pools collection
(``retriever.stores.ServerPoolCollection``), when ``PARLEY_RETRIEVER_QDRANT_URL`` is set.

Without a server the retriever keeps both in embedded Qdrant Edge shards (``EdgePassageStore``), not
here. ``VectorStore.open(path=...)`` (qdrant-client's local mode, brute force, one process per folder,
every call under one lock since that client is not thread-safe) serves the tests of this facade only.
``Hit``, the store errors and ``point_id`` are backend-neutral and live in ``retriever.store_port``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client.http import models as qm

from retriever.store_port import Hit, StoreLocked, VectorStoreError, dir_size


class VectorStore:
    """A small, typed facade over ``QdrantClient`` with the few operations Parley needs."""

    def __init__(
        self,
        client: QdrantClient,
        *,
        location: str,
        embedded_path: Path | None = None,
    ) -> None:
        self._client = client
        self.location = location
        self.embedded_path = embedded_path
        # Embedded mode: a process-wide lock (the local client mutates shared numpy arrays and sqlite).
        self._lock: threading.Lock | None = threading.Lock() if embedded_path is not None else None

    @classmethod
    def open(
        cls, *, path: Path | None = None, url: str | None = None, api_key: str | None = None
    ) -> VectorStore:
        """Open a Qdrant server when ``url`` is given, else the embedded store at ``path``."""
        if url:
            try:
                client = QdrantClient(url=url, api_key=api_key, timeout=30)
            except Exception as exc:  # pragma: no cover - constructor rarely fails for a URL
                raise VectorStoreError(f"cannot connect to Qdrant at {url}: {exc}") from exc
            return cls(client, location=url)
        if path is None:
            raise ValueError("either path or url is required")
        path.mkdir(parents=True, exist_ok=True)
        try:
            client = QdrantClient(path=str(path))
        except RuntimeError as exc:
            if "already accessed" in str(exc):
                raise StoreLocked(
                    f"the embedded Qdrant store at {path} is in use by another process "
                    "(stop the retriever service, or point PARLEY_RETRIEVER_QDRANT_URL at a Qdrant server)"
                ) from exc
            raise VectorStoreError(f"cannot open the embedded Qdrant store at {path}: {exc}") from exc
        return cls(client, location=str(path), embedded_path=path)

    @contextmanager
    def _guard(self) -> Iterator[QdrantClient]:
        if self._lock is None:
            yield self._client
            return
        with self._lock:
            yield self._client

    @property
    def client(self) -> QdrantClient:
        """The underlying client (the passage store on a server shares it)."""
        return self._client

    @property
    def embedded(self) -> bool:
        return self.embedded_path is not None

    def close(self) -> None:
        with self._guard() as c:
            c.close()

    # Collections -----------------------------------------------------------------------------------

    def ensure_collection(self, name: str, dim: int, *, keyword_indexes: Sequence[str] = ()) -> None:
        """Create a cosine collection of ``dim`` if it is missing; refuse a collection of another size."""
        with self._guard() as c:
            if c.collection_exists(name):
                existing = self._dim_locked(c, name)
                if existing is not None and existing != dim:
                    raise VectorStoreError(
                        f"collection {name!r} holds {existing}-d vectors, the model makes {dim}-d ones; "
                        "use another collection name (PARLEY_RETRIEVER_PASSAGES_COLLECTION)"
                    )
            else:
                c.create_collection(
                    name, vectors_config=qm.VectorParams(size=dim, distance=qm.Distance.COSINE)
                )
            for field in keyword_indexes:
                # A real index on a server; embedded mode searches by brute force and only warns.
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Payload indexes have no effect")
                    c.create_payload_index(name, field, field_schema=qm.PayloadSchemaType.KEYWORD)

    @staticmethod
    def _dim_locked(c: QdrantClient, name: str) -> int | None:
        params = c.get_collection(name).config.params.vectors
        if isinstance(params, qm.VectorParams):
            return int(params.size)
        return None

    def dim(self, name: str) -> int | None:
        with self._guard() as c:
            return self._dim_locked(c, name) if c.collection_exists(name) else None

    def count(self, name: str) -> int:
        with self._guard() as c:
            if not c.collection_exists(name):
                return 0
            return int(c.count(name, exact=True).count)

    # Points ----------------------------------------------------------------------------------------
    def upsert(
        self, name: str, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[dict[str, Any]]
    ) -> None:
        """Insert or overwrite points (ids from ``point_id``) in one batch."""
        if not ids:
            return
        points = [
            qm.PointStruct(id=pid, vector=vec.tolist(), payload=pl)
            for pid, vec, pl in zip(ids, vectors, payloads, strict=True)
        ]
        with self._guard() as c:
            c.upsert(name, points=points, wait=True)

    def search(self, name: str, vector: np.ndarray, limit: int, *, with_vectors: bool = False) -> list[Hit]:
        """Nearest points by cosine similarity, best first."""
        with self._guard() as c:
            res = c.query_points(
                name, query=vector.tolist(), limit=limit, with_payload=True, with_vectors=with_vectors
            )
        return [Hit.of(p.id, p.score, p.payload, p.vector if with_vectors else None) for p in res.points]

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[Hit]:
        """Points by id in the order asked; missing ids are skipped."""
        if not ids:
            return []
        with self._guard() as c:
            recs = c.retrieve(name, ids=list(ids), with_payload=True, with_vectors=with_vectors)
        by_id = {str(r.id): r for r in recs}
        out = []
        for pid in ids:
            r = by_id.get(str(pid))
            if r is not None:
                out.append(Hit.of(r.id, 0.0, r.payload, r.vector if with_vectors else None))
        return out

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._guard() as c:
            c.delete(name, points_selector=qm.PointIdsList(points=list(ids)), wait=True)

    def delete_where_less(self, name: str, field: str, value: float) -> int:
        """Delete points whose numeric payload ``field`` is below ``value``; returns how many went."""
        flt = qm.Filter(must=[qm.FieldCondition(key=field, range=qm.Range(lt=value))])
        with self._guard() as c:
            if not c.collection_exists(name):
                return 0
            n = int(c.count(name, count_filter=flt, exact=True).count)
            if n:
                c.delete(name, points_selector=qm.FilterSelector(filter=flt), wait=True)
            return n

    def disk_bytes(self) -> int | None:
        """Bytes on disk of the embedded store; None for a server (it lives elsewhere)."""
        if self.embedded_path is None:
            return None
        return dir_size(self.embedded_path)

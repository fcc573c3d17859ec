"""The passage collection, laid out for scale: HNSW, int8 scalar quantization in RAM with exact
rescoring, original vectors and payloads on disk.

Two implementations behind one ``PassageStore`` protocol (``retriever.store_port``):

- ``EdgePassageStore`` (the embedded default): the Qdrant engine in-process through Qdrant Edge
  (``qdrant-edge-py``, pinned), one shard folder per collection in the server's storage format. Writes go
  to its write-ahead log; ``finish()`` runs the optimizer that builds the HNSW graph and the int8 codes.
  One process per shard folder (its WAL is locked): a second opener gets ``StoreLocked``.
- ``ServerPassageStore``: a Qdrant server or cluster through ``qdrant-client``, the collection created
  with the same layout plus ``shard_number`` and ``replication_factor``.

Both answer a search with the same parameters (``hnsw_ef``, oversampling, rescore), so a query is
answered the same way embedded and on a server. ``exact=True`` searches by brute force over the original
vectors (tests and the recall benchmark compare against it).
"""

from __future__ import annotations

import errno
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe
from qdrant_client.http import models as qm

from retriever.store_port import Hit, StoreLocked, VectorStoreError, dir_size

# The Qdrant Edge release this code and its on-disk format are tested with (pyproject pins the same).
EDGE_VERSION = "0.9.0"


@dataclass(frozen=True)
class StoreLayout:
    """How the passage collection is stored and searched (``RetrieverSettings`` fields of the same names)."""

    quantization: str = "int8"
    on_disk: bool = True
    hnsw_m: int = 16
    hnsw_ef_construct: int = 100
    hnsw_ef: int = 512
    oversampling: float = 2.0
    shard_number: int = 1
    replication_factor: int = 1


def storage_error(exc: BaseException, where: str) -> VectorStoreError:
    """A clear error for a full disk (from Python, Qdrant or Lucene alike), else the store's own words."""
    text = str(exc)
    if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left" in text:
        return VectorStoreError(
            f"the disk holding {where} is full: free space and run the same command again "
            "(the build continues after its last committed batch)"
        )
    return VectorStoreError(f"{where}: {text}")


class EdgePassageStore:
    """The passage collection in an embedded Qdrant Edge shard (one folder, one process)."""

    embedded = True

    def __init__(self, path: Path, layout: StoreLayout) -> None:
        self.path = path
        self.location = str(path)
        self.layout = layout
        self._shard: Any = None
        self._lock = threading.Lock()  # the shard is safe for concurrent reads; writes are serialised
        if (path / "edge_config.json").exists():
            self._shard = self._load()

    # Opening ---------------------------------------------------------------------------------------
    def _load(self) -> Any:
        try:
            return qe.EdgeShard.load(str(self.path))
        except Exception as exc:
            text = str(exc)
            if "WouldBlock" in text or "lock" in text.lower():
                raise StoreLocked(
                    f"the passage store at {self.path} is in use by another process "
                    "(stop the retriever service or the other build, or point PARLEY_RETRIEVER_QDRANT_URL "
                    "at a Qdrant server)"
                ) from exc
            raise VectorStoreError(
                f"cannot open the passage store at {self.path} ({text}); it may have been written by "
                f"another Qdrant Edge version than {EDGE_VERSION}: rebuild it with `parley index build`"
            ) from exc

    def _config(self, dim: int) -> Any:
        lay = self.layout
        place = qe.Memory.Cold if lay.on_disk else qe.Memory.Cached
        quant = (
            qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Pinned)
            if lay.quantization == "int8"
            else None
        )
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, memory=place),
            hnsw_config=qe.HnswIndexConfig(
                m=lay.hnsw_m, ef_construct=lay.hnsw_ef_construct, full_scan_threshold=10_000
            ),
            quantization_config=quant,
            payload_memory=place,
        )

    def ensure(self, dim: int) -> None:
        """Create the shard for ``dim``-d vectors if it is missing; refuse a shard of another size."""
        with self._lock:
            if self._shard is None:
                try:
                    self.path.mkdir(parents=True, exist_ok=True)
                    self._shard = qe.EdgeShard.create(str(self.path), self._config(dim))
                except OSError as exc:
                    raise storage_error(exc, str(self.path)) from exc
                return
        existing = self.dim()
        if existing is not None and existing != dim:
            raise VectorStoreError(
                f"the passage store at {self.path} holds {existing}-d vectors, the encoder makes {dim}-d "
                "ones; use another collection name (PARLEY_RETRIEVER_PASSAGES_COLLECTION)"
            )

    def _require(self) -> Any:
        if self._shard is None:
            raise VectorStoreError(f"no passage store at {self.path}")
        return self._shard

    # Reading ---------------------------------------------------------------------------------------
    def dim(self) -> int | None:
        cfg = self.path / "edge_config.json"
        if not cfg.exists():
            return None
        data = json.loads(cfg.read_text())
        vectors = data.get("vectors") or {}
        params = vectors.get("") if isinstance(vectors, dict) else None
        size = (params or {}).get("size") if isinstance(params, dict) else None
        return int(size) if size else None

    def count(self) -> int:
        if self._shard is None:
            return 0
        return int(self._shard.count(qe.CountRequest(exact=True)))

    def _params(self, exact: bool) -> Any:
        if exact:
            return qe.SearchParams(exact=True, quantization=qe.QuantizationSearchParams(ignore=True))
        return qe.SearchParams(
            hnsw_ef=self.layout.hnsw_ef,
            quantization=qe.QuantizationSearchParams(rescore=True, oversampling=self.layout.oversampling),
        )

    def search(
        self, vector: np.ndarray, limit: int, *, with_vectors: bool = False, exact: bool = False
    ) -> list[Hit]:
        """Nearest passages by cosine similarity, best first.

        The search itself fetches ids only; payloads (and vectors) come from one ``retrieve`` of the
        winners. Measured on Qdrant Edge 0.9.0, a query that returns on-disk payloads costs ~1-10 ms
        against ~0.2 ms for the ids plus 0.02 ms for the retrieve.
        """
        if self._shard is None or limit <= 0:
            return []
        req = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(np.asarray(vector, dtype=np.float32).tolist()),
            with_payload=False,
            with_vector=False,
            params=self._params(exact),
        )
        scored = self._shard.query(req)
        if not scored:
            return []
        recs = self._shard.retrieve([p.id for p in scored], with_payload=True, with_vector=with_vectors)
        by_id = {str(r.id): r for r in recs}
        return [
            Hit.of(p.id, p.score, r.payload, r.vector if with_vectors else None)
            for p, r in ((p, by_id.get(str(p.id))) for p in scored)
            if r is not None
        ]

    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[Hit]:
        """Passages by point id in the order asked; missing ids are skipped."""
        if self._shard is None or not ids:
            return []
        recs = self._shard.retrieve(list(ids), with_payload=True, with_vector=with_vectors)
        by_id = {str(r.id): r for r in recs}
        return [
            Hit.of(r.id, 0.0, r.payload, r.vector if with_vectors else None)
            for r in (by_id.get(str(i)) for i in ids)
            if r is not None
        ]

    # Writing ---------------------------------------------------------------------------------------
    def upsert(self, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[dict[str, Any]]) -> None:
        """Insert or overwrite points (ids from ``point_id``); durable once in the write-ahead log."""
        if not ids:
            return
        rows = np.asarray(vectors, dtype=np.float32).tolist()  # one conversion for the batch
        points = [
            qe.Point(id=pid, vector=vec, payload=pl) for pid, vec, pl in zip(ids, rows, payloads, strict=True)
        ]
        with self._lock:
            try:
                self._require().update(qe.UpdateOperation.upsert_points(points))
            except Exception as exc:
                raise storage_error(exc, str(self.path)) from exc

    def delete_where_less(self, field: str, value: float) -> int:
        """Delete points whose numeric payload ``field`` is below ``value``; returns how many went."""
        if self._shard is None:
            return 0
        flt = qe.Filter(must=[qe.FieldCondition(key=field, range=qe.RangeFloat(lt=value))])
        with self._lock:
            n = int(self._shard.count(qe.CountRequest(exact=True, filter=flt)))
            if n:
                self._shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
        return n

    def compact(self) -> None:
        """Reclaim the space of deleted points. An Edge shard has no background optimizer: a delete only
        marks its points, so a shard that keeps deleting (the pools' sweeps) would grow on disk and in
        memory with every point it ever held. Qdrant's vacuum rewrites only segments whose deleted share
        is above its threshold, so a compaction after a small sweep is cheap."""
        with self._lock:
            if self._shard is not None:
                try:
                    self._shard.optimize()
                    self._shard.flush()
                except Exception as exc:
                    raise storage_error(exc, str(self.path)) from exc

    def delete_corpus(self, corpus: str) -> None:
        """Drop every passage of ``corpus`` (a rebuild replaces the corpus as a whole)."""
        if self._shard is None:
            return
        cond = qe.FieldCondition(key="corpus", match=qe.MatchValue(value=corpus))
        with self._lock:
            self._shard.update(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=[cond])))

    def flush(self) -> None:
        with self._lock:
            if self._shard is not None:
                try:
                    self._shard.flush()
                except Exception as exc:
                    raise storage_error(exc, str(self.path)) from exc

    def finish(self) -> None:
        """Build the HNSW graph and int8 codes (Qdrant's optimizer; minutes at a million passages)."""
        self.compact()

    def disk_bytes(self) -> int | None:
        return dir_size(self.path)

    def close(self) -> None:
        with self._lock:
            if self._shard is not None:
                self._shard.close()
                self._shard = None


class ServerPassageStore:
    """The passage collection on a Qdrant server or cluster, created with the scale layout."""

    embedded = False

    def __init__(self, client: Any, name: str, layout: StoreLayout, *, location: str) -> None:
        self._client = client
        self.name = name
        self.layout = layout
        self.location = location

    def ensure(self, dim: int) -> None:
        c, lay = self._client, self.layout
        if c.collection_exists(self.name):
            existing = self.dim()
            if existing is not None and existing != dim:
                raise VectorStoreError(
                    f"collection {self.name!r} holds {existing}-d vectors, the encoder makes {dim}-d ones; "
                    "use another collection name (PARLEY_RETRIEVER_PASSAGES_COLLECTION)"
                )
            return
        quant = (
            qm.ScalarQuantization(
                scalar=qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, quantile=0.99, always_ram=True)
            )
            if lay.quantization == "int8"
            else None
        )
        c.create_collection(
            self.name,
            vectors_config=qm.VectorParams(size=dim, distance=qm.Distance.COSINE, on_disk=lay.on_disk),
            hnsw_config=qm.HnswConfigDiff(m=lay.hnsw_m, ef_construct=lay.hnsw_ef_construct),
            quantization_config=quant,
            on_disk_payload=lay.on_disk,
            shard_number=lay.shard_number,
            replication_factor=lay.replication_factor,
        )

    def dim(self) -> int | None:
        if not self._client.collection_exists(self.name):
            return None
        params = self._client.get_collection(self.name).config.params.vectors
        return int(params.size) if isinstance(params, qm.VectorParams) else None

    def count(self) -> int:
        if not self._client.collection_exists(self.name):
            return 0
        return int(self._client.count(self.name, exact=True).count)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, payloads: Sequence[dict[str, Any]]) -> None:
        if not ids:
            return
        points = [
            qm.PointStruct(id=pid, vector=vec.tolist(), payload=pl)
            for pid, vec, pl in zip(ids, np.asarray(vectors, dtype=np.float32), payloads, strict=True)
        ]
        self._client.upsert(self.name, points=points, wait=True)

    def delete_corpus(self, corpus: str) -> None:
        if not self._client.collection_exists(self.name):
            return
        cond = qm.FieldCondition(key="corpus", match=qm.MatchValue(value=corpus))
        self._client.delete(
            self.name, points_selector=qm.FilterSelector(filter=qm.Filter(must=[cond])), wait=True
        )

    def flush(self) -> None:
        """Writes are acknowledged by the server once durable (``wait=True``)."""

    def finish(self) -> None:
        """The server's optimizer builds the index in the background."""

    def search(
        self, vector: np.ndarray, limit: int, *, with_vectors: bool = False, exact: bool = False
    ) -> list[Hit]:
        if limit <= 0:
            return []
        params = (
            qm.SearchParams(exact=True, quantization=qm.QuantizationSearchParams(ignore=True))
            if exact
            else qm.SearchParams(
                hnsw_ef=self.layout.hnsw_ef,
                quantization=qm.QuantizationSearchParams(rescore=True, oversampling=self.layout.oversampling),
            )
        )
        res = self._client.query_points(
            self.name,
            query=np.asarray(vector, dtype=np.float32).tolist(),
            limit=limit,
            with_payload=True,
            with_vectors=with_vectors,
            search_params=params,
        )
        return [Hit.of(p.id, p.score, p.payload, p.vector if with_vectors else None) for p in res.points]

    def retrieve(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[Hit]:
        if not ids:
            return []
        recs = self._client.retrieve(self.name, ids=list(ids), with_payload=True, with_vectors=with_vectors)
        by_id = {str(r.id): r for r in recs}
        return [
            Hit.of(r.id, 0.0, r.payload, r.vector if with_vectors else None)
            for r in (by_id.get(str(i)) for i in ids)
            if r is not None
        ]

    def disk_bytes(self) -> int | None:
        return None

    def close(self) -> None:
        """The client belongs to the caller (it is shared with the pools collection)."""

"""Index builds that scale and survive: one streaming pass over the corpus writes the dense passage
store and the BM25 index together, with checkpoints.

The pass reads the corpus row by row (memory does not grow with it), cuts it into committed batches of
``commit_every`` passages (always at a row boundary), encodes each batch in several processes (or takes
its vectors from precomputed ``.npy`` shards) while the previous batch is written, and after each batch:

1. upserts the passages into the passage store (durable in its write-ahead log) and flushes it;
2. adds them to the Lucene index and commits it;
3. writes the checkpoint (the corpus position after the batch) by atomic rename.

After a crash (SIGKILL included) the same command continues after the last checkpoint: the passages of
the one batch in flight are read and encoded again, and their ids (stable per passage) overwrite
themselves in the passage store; in Lucene, whose last commit may already hold that batch, they are
deleted by id before being added again. Nothing before the checkpoint is encoded again.

The pieces live apart: corpus sources (``retriever.corpus_sources``), the checkpoint and the refused
rows (``retriever.ingest_checkpoint``), precomputed vector shards (``retriever.vector_shards``); this
module holds the encoder processes and the pass itself.

Malformed rows are counted and written with their line numbers to ``ingest/<corpus>.rejects.tsv``; they
never stop a build. A vector shard that does not fit the corpus, a full disk or a locked store stop it
with a clear error and a resumable checkpoint.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from retriever.corpus import Passage
from retriever.corpus_sources import CorpusSource
from retriever.corpus_sources import FileSource as FileSource  # bench/scale_bench.py imports it here
from retriever.embedder import Embedder
from retriever.encoders import make_embedder
from retriever.ingest_checkpoint import Checkpoint, IngestError, Reject, checkpoint_path, rejects_path
from retriever.procs import exit_with_parent
from retriever.settings import RetrieverSettings
from retriever.store_port import PassageStore, point_id
from retriever.vector_shards import VectorShards

# Batches read ahead of the one being written (encoding and Lucene work on them meanwhile).
AHEAD = 2
# Batch sizing: the first batch, then about this many seconds of work per batch (up to commit_every).
FIRST_BATCH = 256
BATCH_SECONDS = 15.0


# ---------------------------------------------------------------------------------------------------
# Encoding in worker processes
# ---------------------------------------------------------------------------------------------------

_WORKER_EMBEDDER: Embedder | None = None


def _init_worker(settings_json: str, device: str | None, threads: int, parent: int) -> None:
    global _WORKER_EMBEDDER
    exit_with_parent(parent)
    settings = RetrieverSettings.model_validate_json(settings_json)
    _WORKER_EMBEDDER = make_embedder(settings, threads=threads, device=device)


def _embed_in_worker(texts: list[str]) -> np.ndarray:
    assert _WORKER_EMBEDDER is not None
    return _WORKER_EMBEDDER.embed(texts)


class BatchEncoder:
    """Encodes texts in ``workers`` processes (each with its own encoder), or in one thread in process.

    ``submit`` returns futures of chunk vectors; the caller keeps the next batch encoding while it
    writes the previous one, so encoding and writes overlap.
    """

    def __init__(
        self,
        settings: RetrieverSettings,
        embedder: Embedder,
        *,
        workers: int,
        device: str | None,
        chunk: int = 256,
    ) -> None:
        self._embedder = embedder
        self._executor: Executor
        # A pipelined (GPU) encoder tokenizes in its own processes and keeps its device busy across a
        # whole batch: it gets each batch in one call, from this process.
        pipelined = hasattr(embedder, "embed_stream")
        self.chunk = 1 << 62 if pipelined else chunk
        if workers > 1 and not pipelined:
            threads = max(1, (os.cpu_count() or 1) // workers)
            self._executor = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(settings.model_dump_json(), device, threads, os.getpid()),
            )
            self._fn: Callable[[list[str]], np.ndarray] = _embed_in_worker
        else:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-encode")
            self._fn = embedder.embed

    def submit(self, texts: list[str]) -> list[Future[np.ndarray]]:
        return [
            self._executor.submit(self._fn, texts[i : i + self.chunk])
            for i in range(0, len(texts), self.chunk)
        ]

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------------------
# The build
# ---------------------------------------------------------------------------------------------------


class Bm25Sink(Protocol):
    def add(self, passages: Sequence[Passage], *, replace: bool) -> Future[None]: ...
    def commit(self) -> None: ...


@dataclass
class IngestReport:
    corpus: str
    passages: int  # written by this run
    total_passages: int  # written by this build, resumed runs included
    rejected: int
    resumed_from: int  # passages already committed when this run started
    seconds: float
    encode_s: float
    write_s: float
    rejects_file: Path | None
    first_rejects: list[Reject]

    @property
    def passages_per_s(self) -> float:
        return self.passages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Batch:
    passages: list[Passage]
    position: int
    line: int
    rejects: list[Reject]
    vectors: list[Future[np.ndarray]] | np.ndarray
    lucene: Future[None] | None = None


@dataclass(eq=False)
class IngestRun:
    """One streaming pass of a corpus into the passage store (and BM25), resumable from its checkpoint.

    ``workers`` defaults to the settings' ``ingest_workers``, ``checkpoint_file`` to the corpus's own
    checkpoint in the ingest folder (``checkpoint_location``).
    """

    settings: RetrieverSettings
    source: CorpusSource
    store: PassageStore
    embedder: Embedder
    _: KW_ONLY
    bm25: Bm25Sink | None = None
    vectors: VectorShards | None = None
    workers: int | None = None
    device: str | None = None
    progress: bool = True
    checkpoint_file: Path | None = None
    verify_vectors: bool = True
    _encode_s: float = field(init=False, default=0.0, repr=False)
    _write_s: float = field(init=False, default=0.0, repr=False)
    _lucene_submitted: int = field(init=False, default=0, repr=False)

    @property
    def checkpoint_location(self) -> Path:
        return self.checkpoint_file or checkpoint_path(self.settings, self.source.corpus)

    def load_checkpoint(self) -> Checkpoint:
        """The checkpoint to continue from, or a fresh one; refuses another source's checkpoint."""
        cp = Checkpoint.load(self.checkpoint_location)
        if cp is None:
            return Checkpoint(identity=self.source.identity, collection=self.settings.collection)
        if cp.identity != self.source.identity or cp.collection != self.settings.collection:
            raise IngestError(
                f"{self.checkpoint_location} belongs to another build "
                f"({cp.identity.get('file') or cp.identity}); finish that one, or start over with --restart"
            )
        return cp

    def run(self) -> IngestReport:
        cp = self.load_checkpoint()
        resumed_from = cp.passages
        t0 = time.perf_counter()
        dim = self.vectors.dim if self.vectors is not None else self.embedder.dim
        if self.vectors is not None and self.vectors.dim != self.embedder.dim:
            raise IngestError(
                f"the vector shards are {self.vectors.dim}-d, the encoder ({self.embedder.name}) makes "
                f"{self.embedder.dim}-d vectors: they come from another model"
            )
        self.store.ensure(dim)
        bar = tqdm(
            total=self.source.size,
            initial=cp.position,
            unit=self.source.unit,
            unit_scale=self.source.unit == "B",
            desc=f"index {self.source.corpus}",
            disable=not self.progress,
            dynamic_ncols=True,
        )
        first_rejects: list[Reject] = []
        encoder = (
            None
            if self.vectors is not None
            else BatchEncoder(
                self.settings,
                self.embedder,
                workers=self.workers or self.settings.ingest_workers,
                device=self.device,
            )
        )
        written = 0
        try:
            pending: deque[_Batch] = deque()
            # Lucene takes a batch as soon as it is read, ahead of its checkpoint; after a resume, the
            # passages its last commit may already hold (recorded in the checkpoint) are replaced.
            may_hold, read = cp.lucene_ahead, 0
            self._lucene_submitted = cp.passages
            next_vector = cp.passages
            for batch in self._batches(cp):
                if self.bm25 is not None and batch.passages:
                    batch.lucene = self.bm25.add(batch.passages, replace=read < may_hold)
                    self._lucene_submitted += len(batch.passages)
                read += len(batch.passages)
                if self.vectors is not None:
                    batch.vectors = self.vectors.take(next_vector, len(batch.passages))
                    next_vector += len(batch.passages)
                elif encoder is not None:
                    batch.vectors = encoder.submit([p.embed_text() for p in batch.passages])
                pending.append(batch)
                if len(pending) >= AHEAD:  # the next batch encodes while the one before it is written
                    written += self._commit(pending.popleft(), cp, bar, first_rejects)
            while pending:
                written += self._commit(pending.popleft(), cp, bar, first_rejects)
            if self.vectors is not None and next_vector != self.vectors.total and self.source_complete():
                raise IngestError(
                    f"the vector shards hold {self.vectors.total} vectors but the corpus has {next_vector} "
                    "passages: the shards do not match this corpus file"
                )
            cp.done = True
            cp.save(self.checkpoint_location)
        finally:
            bar.close()
            if encoder is not None:
                encoder.close()
        return IngestReport(
            corpus=self.source.corpus,
            passages=written,
            total_passages=cp.passages,
            rejected=cp.rejected,
            resumed_from=resumed_from,
            seconds=time.perf_counter() - t0,
            encode_s=self._encode_s,
            write_s=self._write_s,
            rejects_file=rejects_path(self.settings, self.source.corpus) if cp.rejected else None,
            first_rejects=first_rejects,
        )

    def source_complete(self) -> bool:
        """Whether the pass read the whole source (a ``--limit`` build reads a prefix)."""
        return getattr(self.source, "limit", None) is None

    def _batch_size(self, cp: Checkpoint, started: float, done_before: int) -> int:
        """Passages in the next batch: about ``BATCH_SECONDS`` of work at the rate seen so far, so the
        first progress and the first checkpoint come within seconds while an encoding build and a
        fast import both commit at a sensible pace; never more than ``commit_every``."""
        elapsed = time.perf_counter() - started
        done = cp.passages - done_before
        if done <= 0 or elapsed <= 0:
            return min(FIRST_BATCH, self.settings.commit_every)
        return min(self.settings.commit_every, max(FIRST_BATCH, int(done / elapsed * BATCH_SECONDS)))

    def _batches(self, cp: Checkpoint) -> Iterator[_Batch]:
        started, done_before = time.perf_counter(), cp.passages
        size = self._batch_size(cp, started, done_before)
        buf: list[Passage] = []
        rejects: list[Reject] = []
        position, line = cp.position, cp.line
        for row in self.source.rows(cp.position, cp.line):
            position, line = row.position, row.line
            if row.rejected is not None:
                rejects.append((row.line, row.rejected))
            buf.extend(row.passages)
            if len(buf) >= size:
                yield _Batch(buf, position, line, rejects, np.zeros((0, 0), np.float32))
                buf, rejects = [], []
                size = self._batch_size(cp, started, done_before)
        if buf or rejects or position != cp.position:
            yield _Batch(buf, position, line, rejects, np.zeros((0, 0), np.float32))

    def _vectors_of(self, batch: _Batch) -> np.ndarray:
        if isinstance(batch.vectors, np.ndarray):
            vecs = batch.vectors
            if self.verify_vectors:
                self._check_alignment(batch.passages, vecs)
            return vecs
        t = time.perf_counter()
        parts = [f.result() for f in batch.vectors]
        self._encode_s += time.perf_counter() - t
        return np.vstack(parts) if parts else np.zeros((0, self.embedder.dim), np.float32)

    def _check_alignment(self, passages: list[Passage], vecs: np.ndarray) -> None:
        """Imported vectors must be this corpus's: the batch's first passage is encoded and compared."""
        if not passages:
            return
        ours = self.embedder.embed([passages[0].embed_text()])[0]
        theirs = vecs[0] / (float(np.linalg.norm(vecs[0])) or 1.0)
        if float(ours @ theirs) < 0.97:  # int8 vs fp32 encoders of one model agree to >= 0.989
            raise IngestError(
                f"the imported vector for passage {passages[0].id!r} does not match its text "
                f"(cosine {float(ours @ theirs):.2f} with the encoder's): the shards are misaligned with the "
                "corpus or come from another model"
            )

    def _check_disk(self) -> None:
        """Stop before a batch when the disk is nearly full.

        The stores write through memory maps, and a write to a full disk arrives as SIGBUS, which kills
        the process with no message; checking first turns it into an error and a clean checkpoint.
        """
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.settings.data_dir).free
        if free < self.settings.min_free_disk_mb * 2**20:
            raise IngestError(
                f"the disk holding {self.settings.data_dir} is full ({free / 2**20:.0f} MiB free, "
                f"PARLEY_RETRIEVER_MIN_FREE_DISK_MB={self.settings.min_free_disk_mb}): free space and run "
                "the same command again (the build continues after its last committed batch)"
            )

    def _commit(self, batch: _Batch, cp: Checkpoint, bar: tqdm[Any], first_rejects: list[Reject]) -> int:
        self._check_disk()
        vecs = self._vectors_of(batch)
        t = time.perf_counter()
        if batch.passages:
            self.store.upsert(
                [point_id(p.id) for p in batch.passages],
                vecs,
                [p.payload(self.source.corpus) for p in batch.passages],
            )
            self.store.flush()
        if batch.lucene is not None:
            batch.lucene.result()  # Lucene indexed it on its own threads meanwhile
        if self.bm25 is not None:
            cp.lucene_ahead = self._lucene_submitted - (cp.passages + len(batch.passages))
            self.bm25.commit()  # holds every batch submitted so far, this one and those read ahead
        if batch.rejects:
            self._record_rejects(batch.rejects)
            first_rejects.extend(batch.rejects[: max(0, 20 - len(first_rejects))])
        cp.position, cp.line = batch.position, batch.line
        cp.passages += len(batch.passages)
        cp.rejected += len(batch.rejects)
        cp.batches += 1
        cp.save(self.checkpoint_location)
        self._write_s += time.perf_counter() - t
        bar.update(batch.position - bar.n)
        bar.set_postfix(passages=cp.passages, rejected=cp.rejected, refresh=False)
        return len(batch.passages)

    def _record_rejects(self, rejects: list[Reject]) -> None:
        path = rejects_path(self.settings, self.source.corpus)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            for line, why in rejects:
                fh.write(f"{line}\t{why}\n")

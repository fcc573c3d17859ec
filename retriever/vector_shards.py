"""Precomputed passage vectors as ``.npy`` shards: ``VectorShards`` reads them back in corpus order for
``parley index build --vectors``; ``encode_to_shards`` writes them (on a GPU machine, say), resumably.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from retriever.corpus_sources import CorpusSource
from retriever.embedder import Embedder
from retriever.ingest_checkpoint import Checkpoint, IngestError
from retriever.procs import exit_with_parent


class VectorShards:
    """``.npy`` shards (sorted by file name) whose rows, end to end, are the corpus passages in order."""

    def __init__(self, folder: Path) -> None:
        files = sorted(folder.glob("*.npy"))
        if not files:
            raise IngestError(f"no .npy vector shards in {folder}")
        self.files = files
        self._arrays = [np.load(f, mmap_mode="r") for f in files]
        dims = {a.shape[1] if a.ndim == 2 else -1 for a in self._arrays}
        if len(dims) != 1 or -1 in dims:
            shapes = ", ".join(f"{f.name} {a.shape}" for f, a in zip(files, self._arrays, strict=True))
            raise IngestError(f"vector shards must be 2-D arrays of one width: {shapes}")
        self.dim = dims.pop()
        self._starts = np.cumsum([0] + [a.shape[0] for a in self._arrays])
        self.total = int(self._starts[-1])

    def take(self, start: int, n: int) -> np.ndarray:
        """Rows ``start .. start+n`` across shards; an error if the shards end first."""
        if start + n > self.total:
            raise IngestError(
                f"the vector shards hold {self.total} vectors but the corpus has more passages "
                f"(passage {self.total + 1} has no vector): the shards do not match this corpus file"
            )
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        i = int(np.searchsorted(self._starts, start, side="right") - 1)
        while n > 0:
            off = start - int(self._starts[i])
            chunk = self._arrays[i][off : off + n]
            parts.append(np.asarray(chunk, dtype=np.float32))
            start += len(chunk)
            n -= len(chunk)
            i += 1
        return np.vstack(parts)


def encode_to_shards(
    source: CorpusSource, embedder: Embedder, out: Path, *, shard_size: int = 100_000, progress: bool = True
) -> int:
    """Encode a corpus into ``.npy`` shards for ``parley index build --vectors`` (on a GPU machine, say).

    Shards are written whole by atomic rename with a checkpoint beside them, so a killed run continues
    after its last shard. Each shard ends at the first row boundary after ``shard_size`` passages.
    A pipelined encoder (``embed_stream``, the GPU one) reads the corpus on its own thread and a writer
    thread saves each shard while the next is encoded, so neither reading nor writing stalls the device;
    its stage rates show on the progress bar. Returns the number of passages encoded in all.
    """
    out.mkdir(parents=True, exist_ok=True)
    cp_file = out / "encode.checkpoint.json"
    cp = Checkpoint.load(cp_file) or Checkpoint(identity=source.identity, collection=embedder.name)
    if cp.identity != source.identity:
        raise IngestError(f"{out} holds shards of another corpus ({cp.identity}); use an empty folder")
    bar = tqdm(total=source.size, initial=cp.position, unit=source.unit, unit_scale=source.unit == "B",
               desc=f"encode {source.corpus}", disable=not progress, dynamic_ncols=True)  # fmt: skip

    def save(vecs: np.ndarray, position: int, line: int) -> None:
        tmp = out / f"part-{cp.batches:05d}.partial.npy"
        np.save(tmp, vecs.astype(np.float32))
        os.replace(tmp, out / f"part-{cp.batches:05d}.npy")
        cp.position, cp.line, cp.passages, cp.batches = (
            position,
            line,
            cp.passages + len(vecs),
            cp.batches + 1,
        )
        cp.save(cp_file)
        bar.update(position - bar.n)

    try:
        stream = getattr(embedder, "embed_stream", None)
        if stream is not None:
            _encode_streaming(source, embedder, stream, cp, shard_size, save, bar)
        else:
            buf: list[str] = []
            position, line = cp.position, cp.line
            for row in source.rows(cp.position, cp.line):
                position, line = row.position, row.line
                buf.extend(p.embed_text() for p in row.passages)
                if len(buf) >= shard_size:
                    save(embedder.embed(buf), position, line)
                    buf.clear()
            if buf or position != cp.position:
                save(embedder.embed(buf) if buf else np.zeros((0, embedder.dim), np.float32), position, line)
        cp.done = True
        cp.save(cp_file)
    finally:
        bar.close()
    return cp.passages


# Texts per chunk handed to a pipelined encoder: big enough to keep its tokenizer workers busy, small
# enough that a shard ends close to ``shard_size``.
STREAM_CHUNK = 8192


def _encode_streaming(
    source: CorpusSource,
    embedder: Embedder,
    stream: Callable[[Iterator[list[str]]], Iterator[np.ndarray]],
    cp: Checkpoint,
    shard_size: int,
    save: Callable[[np.ndarray, int, int], None],
    bar: tqdm[Any],
) -> None:
    """``encode_to_shards`` for a pipelined encoder: chunks end on row boundaries, and a chunk that
    completes a shard carries the shard's end (position, line); a writer thread saves the shards in
    order, at most one behind the encoder."""
    ends: deque[tuple[int, int, bool]] = deque()  # per chunk: position, line, whether a shard ends there
    # The corpus is parsed in a process of its own: parsing rows is Python work that, on this process's
    # interpreter lock, would slow the model's loading and its kernel launches (measured on an H100:
    # model loaded in 23 s instead of 12 while rows were parsed beside it).
    ctx = multiprocessing.get_context("spawn")
    chunk_q: Any = ctx.Queue(maxsize=8)
    reader = ctx.Process(
        target=_read_chunks,
        args=(source, cp.position, cp.line, shard_size, chunk_q, os.getpid()),
        name="parley-corpus-reader",
        daemon=True,
    )
    reader.start()

    def chunks() -> Iterator[list[str]]:
        while True:
            try:
                item = chunk_q.get(timeout=1.0)
            except queue.Empty:
                if not reader.is_alive():
                    raise IngestError(f"the corpus reader ended (exit code {reader.exitcode})") from None
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            texts, position, line, shard_end = item
            ends.append((position, line, shard_end))
            yield texts

    try:
        _write_streamed_shards(embedder, stream(chunks()), ends, save, bar)
    finally:
        if reader.is_alive():
            reader.terminate()
        reader.join(timeout=5)


def _read_chunks(
    source: CorpusSource, position: int, line: int, shard_size: int, out: Any, parent: int
) -> None:
    """The corpus reader process: chunks of texts that end on row boundaries, each with the position
    after it and whether a shard (the first row boundary at or past ``shard_size`` passages) ends there;
    then ``None``, or the error that stopped it."""
    exit_with_parent(parent)
    try:
        buf: list[str] = []
        in_shard = 0
        cut = (position, line)
        for row in source.rows(position, line):
            position, line = row.position, row.line
            buf.extend(p.embed_text() for p in row.passages)
            if in_shard + len(buf) >= shard_size or len(buf) >= STREAM_CHUNK:
                in_shard += len(buf)
                shard_end = in_shard >= shard_size
                out.put((buf, position, line, shard_end))
                if shard_end:
                    in_shard, cut = 0, (position, line)
                buf = []
        if buf or in_shard or (position, line) != cut:
            out.put((buf, position, line, True))
        out.put(None)
    except Exception as exc:  # handed to the encoding process, which raises it
        out.put(exc)


def _write_streamed_shards(
    embedder: Embedder,
    vectors: Iterator[np.ndarray],
    ends: deque[tuple[int, int, bool]],
    save: Callable[[np.ndarray, int, int], None],
    bar: tqdm[Any],
) -> None:
    """Gathers the streamed vectors into shards and saves each on a writer thread, in order."""
    stats = getattr(embedder, "stats", None)
    parts: list[np.ndarray] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-shard-writer") as writer:
        written: Future[None] | None = None
        for vecs in vectors:
            parts.append(vecs)
            position, line, shard_end = ends.popleft()
            if stats is not None:
                bar.set_postfix_str(stats.line(), refresh=False)
            if shard_end:
                if written is not None:
                    written.result()  # shards are saved in order, one at a time
                whole = np.vstack(parts) if parts else np.zeros((0, embedder.dim), np.float32)
                written = writer.submit(save, whole, position, line)
                parts = []
        if written is not None:
            written.result()

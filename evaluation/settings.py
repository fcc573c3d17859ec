"""Settings of ``parley eval`` (``PARLEY_EVAL_*``), read once by the CLI and injected."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.settings import ParleySettings, default_data_dir


class EvalSettings(ParleySettings):
    """The evaluation harness: the LLM judge's own endpoint, the batch API, bootstrap parameters.

    The judge deliberately has its own endpoint and model (``PARLEY_EVAL_JUDGE_*``): grading with the
    model under test would let its mistakes grade themselves.
    """

    model_config = SettingsConfigDict(env_prefix="PARLEY_EVAL_", frozen=True, extra="ignore")

    judge_base_url: str | None = Field(default=None, description="OpenAI-compatible URL of the judge model")
    judge_model: str = "judge"
    judge_api_key: SecretStr | None = None
    judge_timeout_s: float = Field(default=120.0, gt=0)
    judge_max_tokens: int = Field(default=256, ge=16)
    api_url: str | None = Field(default=None, description="Parley gateway URL for --api runs")
    api_key: SecretStr | None = None
    api_poll_interval_s: float = Field(default=2.0, gt=0)
    api_timeout_s: float = Field(default=30.0, gt=0)
    prompt_style: Literal["auto", "paper", "robust"] = Field(
        default="auto",
        description="prompt style of runs that name none (no --prompt-styles, --set prompt_style or "
        "preset): auto = robust on the embedded models (what they answer reliably with; also an endpoint "
        "whose PARLEY_LLM_MODEL names a packaged model), the papers' wording on any other endpoint or "
        "the gateway",
    )
    bootstrap_samples: int = Field(default=10_000, ge=100)
    bootstrap_seed: int = 0
    cache_path: Path = Field(
        default_factory=lambda: default_data_dir() / "call-cache.sqlite",
        description="the call cache of in-process evaluations (--cache, the default; --no-cache; "
        "--cache-only)",
    )
    cache_max_mb: int = Field(
        default=2048, ge=1, description="the call cache's size bound; least recently used evicted"
    )
    max_consecutive_failures: int = Field(
        default=10, ge=1, description="stop a run early when this many items fail in a row (LLM down)"
    )

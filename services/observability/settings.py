"""Logs and traces settings, the same for every process."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.settings import ParleySettings


class ObservabilitySettings(ParleySettings):
    """Logs and traces, the same for every process (``PARLEY_LOG_FORMAT``, ``PARLEY_TRACE_PROMPTS``
    and OpenTelemetry's own ``OTEL_EXPORTER_OTLP_ENDPOINT``); gateway, worker and retriever each read
    them once at start-up."""

    model_config = SettingsConfigDict(
        env_prefix="PARLEY_", frozen=True, extra="ignore", populate_by_name=True
    )

    log_format: Literal["text", "json"] = Field(
        default="text", description="text for people, json for one JSON object per line (job ids included)"
    )
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="OTLP/HTTP collector base URL (spans go to its /v1/traces); unset = no traces",
    )
    trace_prompts: bool = Field(
        default=False, description="put prompt and reply text into LLM call spans (off: ids and counts only)"
    )

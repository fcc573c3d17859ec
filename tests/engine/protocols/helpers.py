"""Shared helpers for the protocol end-to-end tests (scripted OpenAI-compatible server)."""

from __future__ import annotations

from typing import Any

from engine.config import DebateConfig
from engine.context import SingleModel
from engine.result import DebateResult
from engine.runner import run_debate
from services.knowledge import KnowledgePool, empty_pool
from services.llm.client import OpenAIChatClient
from tests.support.scripted_llm import ScriptedLLM, request_text

QUESTION = "Which city is the capital of France?"


async def debate(
    server: ScriptedLLM,
    pool: KnowledgePool | None = None,
    *,
    question: str = QUESTION,
    gold: list[str] | None = None,
    **cfg: Any,
) -> tuple[DebateResult, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    async with OpenAIChatClient(server.base_url, "scripted") as client:
        result = await run_debate(
            question,
            pool if pool is not None else empty_pool(question),
            DebateConfig(**cfg),
            SingleModel(client),
            lambda e, d: events.append((e, d)),
            gold=gold,
        )
    return result, events


def texts(server: ScriptedLLM, marker: str = "") -> list[str]:
    return [request_text(b) for b in server.requests if marker in request_text(b)]

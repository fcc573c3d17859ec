"""The OpenAI-compatible client against a scripted server on a real socket."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.chat_model import ChatMessage, LLMBadRequest, LLMRateLimited, LLMServerError, LLMUnavailable
from services.llm.client import OpenAIChatClient, RetryPolicy, parse_retry_after
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = pytest.mark.unit

MSG: list[ChatMessage] = [{"role": "user", "content": "What is the capital of France?"}]


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def client_for(server: ScriptedLLM, **kwargs: Any) -> OpenAIChatClient:
    return OpenAIChatClient(server.base_url, "scripted", **kwargs)


async def test_usage_and_latency_are_reported(scripted: ScriptedLLM) -> None:
    scripted.on("capital", "The answer is [Paris].")
    async with client_for(scripted) as client:
        out = await client.complete(MSG, temperature=0.2)
    assert out.text == "The answer is [Paris]."
    assert out.prompt_tokens == 6 and out.completion_tokens == 4
    assert out.latency_ms > 0 and out.attempts == 1
    body = scripted.requests[0]
    assert body["temperature"] == 0.2 and body["model"] == "scripted" and body["stream"] is False


async def test_429_is_retried_honouring_retry_after(scripted: ScriptedLLM) -> None:
    scripted.fail_next(429, count=2, headers={"Retry-After": "3"})
    sleep = SleepRecorder()
    async with client_for(scripted, sleep=sleep) as client:
        out = await client.complete(MSG)
    assert out.attempts == 3
    assert sleep.delays == [3.0, 3.0]
    assert len(scripted.requests) == 3


async def test_500_is_retried_with_bounded_jittered_backoff(scripted: ScriptedLLM) -> None:
    scripted.fail_next(500, count=10)
    sleep = SleepRecorder()
    policy = RetryPolicy(max_attempts=4, backoff_base_s=0.5, backoff_max_s=20)
    async with client_for(scripted, sleep=sleep, retry=policy) as client:
        with pytest.raises(LLMServerError) as info:
            await client.complete(MSG)
    assert info.value.status == 500
    assert len(scripted.requests) == 4
    assert len(sleep.delays) == 3
    for attempt, delay in enumerate(sleep.delays, start=1):
        assert 0 <= delay <= 0.5 * 2 ** (attempt - 1)


async def test_408_409_and_503_recover(scripted: ScriptedLLM) -> None:
    for status in (408, 409, 503):
        scripted.fail_next(status)
    scripted.on("capital", "[Paris]")
    async with client_for(scripted, sleep=SleepRecorder()) as client:
        out = await client.complete(MSG)
    assert out.text == "[Paris]" and out.attempts == 4


async def test_400_is_not_retried(scripted: ScriptedLLM) -> None:
    scripted.fail_next(400)
    sleep = SleepRecorder()
    async with client_for(scripted, sleep=sleep) as client:
        with pytest.raises(LLMBadRequest) as info:
            await client.complete(MSG)
    assert info.value.status == 400
    assert len(scripted.requests) == 1 and sleep.delays == []


async def test_rate_limit_error_after_all_attempts_carries_retry_after(scripted: ScriptedLLM) -> None:
    scripted.fail_next(429, count=5, headers={"Retry-After": "1"})
    async with client_for(scripted, sleep=SleepRecorder(), retry=RetryPolicy(max_attempts=2)) as client:
        with pytest.raises(LLMRateLimited) as info:
            await client.complete(MSG)
    assert info.value.retry_after == 1.0


async def test_unreachable_server_names_the_url_after_bounded_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    sleep = SleepRecorder()
    async with OpenAIChatClient(url, "m", sleep=sleep, retry=RetryPolicy(max_attempts=3)) as client:
        with pytest.raises(LLMUnavailable) as info:
            await client.complete(MSG)
    assert url in str(info.value)
    assert len(sleep.delays) == 2


async def test_concurrency_is_limited_per_endpoint() -> None:
    with ScriptedLLM(latency_s=0.05) as server:
        clients = [client_for(server, max_concurrency=2) for _ in range(2)]
        await asyncio.gather(*(clients[i % 2].complete(MSG) for i in range(8)))
        for c in clients:
            await c.aclose()
        assert server.max_in_flight == 2
        assert len(server.requests) == 8


async def test_schema_rejected_falls_back_to_text_once_per_endpoint() -> None:
    schema = {"type": "object", "properties": {"selected": {"type": "array"}}}
    with ScriptedLLM(schema_mode="reject") as server:
        server.on("capital", "[1]")
        async with client_for(server) as client:
            first = await client.complete(MSG, json_schema=schema)
            second = await client.complete(MSG, json_schema=schema)
        assert first.output_mode == "text" and second.output_mode == "text"
        sent = ["response_format" in r for r in server.requests]
        # Once with the schema (rejected), then text only: the endpoint's answer is remembered.
        assert sent == [True, False, False]
        assert client.schema_supported is False


async def test_schema_honoured_returns_json(scripted: ScriptedLLM) -> None:
    scripted.on("capital", "[Paris]", json_reply='{"selected": [2]}')
    async with client_for(scripted) as client:
        out = await client.complete(MSG, json_schema={"type": "object"})
    assert out.output_mode == "schema" and out.text == '{"selected": [2]}'
    assert scripted.requests[0]["response_format"]["type"] == "json_schema"


def test_retry_after_parsing() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("garbage") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


async def test_embedded_endpoint_keeps_at_most_one_request_per_slot_in_flight(tmp_path: Path) -> None:
    """The embedded server decodes one request per slot; more would queue at the server and spend
    their read timeout waiting, so they wait in the client instead."""
    from services.llm.embedded import EmbeddedLLMServer, ServedModel
    from services.llm.factory import build_role_models
    from services.llm.settings import LLMSettings

    with ScriptedLLM(latency_s=0.1) as server:
        embedded = EmbeddedLLMServer(tmp_path / "m.gguf", alias="m", slots=2)
        served = embedded.served()
        assert served.structured_output == "json_schema" and served.max_concurrency == 2
        models = build_role_models(
            LLMSettings(),
            served=ServedModel(server.base_url, "m", max_concurrency=served.max_concurrency),
        )
        try:
            await asyncio.gather(*(models.for_role("debater").complete(MSG) for _ in range(6)))
        finally:
            await models.aclose()
        assert server.max_in_flight == 2 and len(server.requests) == 6


async def test_slotted_servers_are_asked_to_cache_prompts_but_never_for_a_slot(scripted: ScriptedLLM) -> None:
    # Naming a busy slot makes llama.cpp load another prompt's state under the request generating
    # there (bench/slot_isolation.py), so the server always chooses the slot.
    scripted.on("capital", "Paris")
    async with client_for(scripted, slots=4) as slotted, client_for(scripted) as plain:
        for key in ("select", "agent/0", "agent/1", "select", "panel", "agent/0"):
            await slotted.complete(MSG, cache_key=key)
        await slotted.complete(MSG)
        await plain.complete(MSG, cache_key="select")
    asked = scripted.requests[:6]
    assert all(r["cache_prompt"] is True and "id_slot" not in r for r in asked)
    # A call without a prompt family, and any server that is not llama.cpp's, get no extension.
    assert all("cache_prompt" not in r and "id_slot" not in r for r in scripted.requests[6:])


@pytest.mark.parametrize(
    ("extra", "cached"),
    [
        (
            {
                "usage": {
                    "prompt_tokens": 300,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 250},
                }
            },
            250,
        ),
        (
            {
                "usage": {"prompt_tokens": 300, "completion_tokens": 5},
                "timings": {"cache_n": 280, "prompt_n": 20},
            },
            280,
        ),
        ({"usage": {"prompt_tokens": 300, "completion_tokens": 5}}, None),
    ],
)
async def test_cached_prompt_tokens_are_read_from_either_usage_form(
    extra: dict[str, object], cached: int | None
) -> None:
    """vLLM and OpenAI report ``prompt_tokens_details.cached_tokens``; llama-server its ``timings``."""
    import httpx

    def reply(request: httpx.Request) -> httpx.Response:
        body = {
            "model": "m",
            "choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}],
            **extra,
        }
        return httpx.Response(200, json=body)

    async with OpenAIChatClient("http://llm.test/v1", "m", transport=httpx.MockTransport(reply)) as client:
        out = await client.complete(MSG)
    assert out.cached_tokens == cached and out.prompt_tokens == 300

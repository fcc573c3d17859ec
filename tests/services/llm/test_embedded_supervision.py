"""The embedded server's bad days: a prompt too long for its context, and a server that dies.

A prompt that cannot fit is refused before the call, with the sizes, and never mistaken for a server
that rejects structured output. A server that dies mid-debate is started again once on the same port
(the call in flight retries and succeeds); a second death is final and calls fail cleanly. The dying
server is a stand-in started through the same command line as llama-server (the scripted LLM behind a
wrapper script), so no model is loaded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from services.chat_model import ChatMessage, LLMContextExceeded, LLMUnavailable
from services.llm.client import OpenAIChatClient
from services.llm.embedded import EmbeddedLLMServer
from services.llm.factory import build_role_models
from services.llm.settings import LLMSettings

MSG: list[ChatMessage] = [{"role": "user", "content": "What is the capital of France?"}]
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.unit
async def test_a_prompt_that_cannot_fit_is_refused_before_the_call() -> None:
    chats: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(95))})
        chats.append(request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "Paris"}}]})

    transport = httpx.MockTransport(server)
    async with OpenAIChatClient("http://llm.test/v1", "m", context_tokens=100, transport=transport) as c:
        with pytest.raises(LLMContextExceeded) as caught:
            await c.complete(MSG, max_tokens=64)
        assert "103 prompt tokens + 64 for the reply do not fit the context of 100 tokens" in str(
            caught.value
        )
        assert not chats  # nothing was sent to be evaluated
        async with OpenAIChatClient(
            "http://llm.test/v1", "m", context_tokens=4096, transport=transport
        ) as ok:
            assert (await ok.complete(MSG, max_tokens=64)).text == "Paris"


@pytest.mark.unit
async def test_the_servers_own_context_refusal_is_typed_and_keeps_structured_output() -> None:
    bodies: list[bytes] = []

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        error = {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
        return httpx.Response(400, json={"error": error})

    async with OpenAIChatClient("http://llm.test/v1", "m", transport=httpx.MockTransport(server)) as c:
        with pytest.raises(LLMContextExceeded, match="5000 prompt tokens do not fit the context of 4096"):
            await c.complete(MSG, json_schema={"type": "object"})
        assert len(bodies) == 1  # not retried, and not taken for a refusal of response_format
        assert c.schema_supported is not False


def fake_llama_server(tmp_path: Path) -> Path:
    """An executable that takes llama-server's arguments and serves the scripted LLM on --port."""
    script = tmp_path / "llama-server"
    code = (
        "import sys, time; from parley_testing.scripted_llm import ScriptedLLM; a = sys.argv[1:]; "
        "s = ScriptedLLM(port=int(a[a.index('--port') + 1]), default_reply='The answer is [Paris].'); "
        "s.start(); time.sleep(3600)"
    )
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "{code}" "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.slow
@pytest.mark.integration
async def test_a_dead_server_is_restarted_once_then_calls_fail_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the stand-in imports parley_testing
    server = EmbeddedLLMServer(
        tmp_path / "m.gguf",
        alias="m",
        kind="llama-server",
        binary=fake_llama_server(tmp_path),
        startup_timeout_s=60,
        log_path=tmp_path / "server.log",
    )
    server.start()
    try:
        port = server.port
        settings = LLMSettings(retry_window_s=20, backoff_base_s=0.2, backoff_max_s=1)
        models = build_role_models(settings, served=server.served())
        try:
            model = models.for_role("debater")
            assert "Paris" in (await model.complete(MSG)).text
            assert server._proc is not None
            os.kill(server._proc.pid, signal.SIGKILL)  # dies mid-debate
            started = time.monotonic()
            assert "Paris" in (await model.complete(MSG)).text  # retried until it was back
            assert server.port == port and server.restarts_left == 0
            assert time.monotonic() - started < 20
            assert server._proc is not None
            os.kill(server._proc.pid, signal.SIGKILL)  # and again: that one is final
            await asyncio.sleep(1.5)
            short = build_role_models(
                settings.model_copy(update={"retry_window_s": 2}), served=server.served()
            )
            try:
                with pytest.raises(LLMUnavailable):
                    await short.for_role("debater").complete(MSG)
            finally:
                await short.aclose()
            assert server._proc is not None and server._proc.poll() is not None
        finally:
            await models.aclose()
    finally:
        server.stop()

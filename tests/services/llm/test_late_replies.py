"""The client's deadline ends the caller's wait, not the request: against scripted servers on real sockets.

What must hold: a call past ``timeout_s`` raises ``LLMTimeout`` at the deadline, as always; its request
runs on for ``timeout_grace_s`` and hands over what the server reported when it answers within it
(``LLMTimeout.late``); one still running after the grace is cut (the server sees the client leave);
no grace cuts at the deadline; the server's concurrency limit stays held while the request runs; an
attempt the call failed over from is handed over with the call (``late_attempts``); closing the
client cuts whatever still runs, and no request outlives its grace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from services.chat_model import ChatMessage, LLMTimeout
from services.llm.client import OpenAIChatClient, RetryPolicy
from services.llm.replicas import REPLICA_HEALTH, affinity
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.unit

MSG: list[ChatMessage] = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(autouse=True)
def _fresh_health() -> Iterator[None]:
    REPLICA_HEALTH.clear()  # replica health is process-wide per URL; ports are reused
    yield
    REPLICA_HEALTH.clear()


class Served:
    """What the server answered with 200, and whether its client was still there to read it."""

    def __init__(self, server: ScriptedLLM) -> None:
        self.rows: list[tuple[int, bool]] = []
        server.on_served = self.add

    def add(self, body: dict[str, Any], tokens: int, client_gone: bool, took_s: float) -> None:
        self.rows.append((tokens, client_gone))

    async def until(self, n: int, timeout_s: float = 10.0) -> None:
        await until(lambda: len(self.rows) >= n, timeout_s)


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def client(urls: str | list[str], **kwargs: Any) -> OpenAIChatClient:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=4, backoff_base_s=0.01))
    return OpenAIChatClient(urls, "scripted", **kwargs)


async def test_a_reply_after_the_deadline_within_the_grace_is_handed_over() -> None:
    with ScriptedLLM(latency_s=1.0) as server:
        served = Served(server)
        async with client(server.base_url, timeout_s=0.4, timeout_grace_s=3.0) as llm:
            started = time.monotonic()
            with pytest.raises(LLMTimeout, match=r"no reply within 0\.4s") as info:
                await llm.complete(MSG)
            waited = time.monotonic() - started
            assert 0.35 <= waited < 0.8  # the caller's wait ends at the deadline, as always
            assert info.value.late is not None and llm.late_requests == 1
            late = await info.value.late
            assert llm.late_requests == 0
    assert late.prompt_tokens + late.completion_tokens == server.tokens_served > 0
    assert served.rows == [(server.tokens_served, False)]  # read by a client still connected


async def test_a_request_still_running_after_the_grace_is_cut_and_the_server_sees_it() -> None:
    with ScriptedLLM(latency_s=1.5) as server:
        served = Served(server)
        async with client(server.base_url, timeout_s=0.3, timeout_grace_s=0.4) as llm:
            with pytest.raises(LLMTimeout) as info:
                await llm.complete(MSG)
            assert info.value.late is not None
            started = time.monotonic()
            with pytest.raises(LLMTimeout, match=r"nor its grace of 0\.4s"):
                await info.value.late
            assert time.monotonic() - started < 0.7
            assert llm.late_requests == 0  # nothing outlives the grace
            await served.until(1)
    assert served.rows == [(server.tokens_served, True)]  # the client had gone when it answered


async def test_no_grace_cuts_the_request_at_the_deadline() -> None:
    # The server answers long after the cut (1.5 s against 0.3 s), so a loaded machine still has the
    # client's closed connection seen by then.
    with ScriptedLLM(latency_s=1.5) as server:
        served = Served(server)
        async with client(server.base_url, timeout_s=0.3, timeout_grace_s=0) as llm:
            started = time.monotonic()
            with pytest.raises(LLMTimeout) as info:
                await llm.complete(MSG)
            assert time.monotonic() - started < 0.7
            assert info.value.late is None and llm.late_requests == 0
            await served.until(1)
    assert served.rows[0][1] is True


async def test_the_server_limit_stays_held_while_a_request_runs_past_its_deadline() -> None:
    """The server is still busy with it: the next call waits for it (in the client, where no deadline
    runs) instead of queueing at the server behind it."""
    with ScriptedLLM(latency_s=1.0, capacity=1) as server:
        async with client(server.base_url, timeout_s=0.3, timeout_grace_s=3.0, max_concurrency=1) as llm:
            with pytest.raises(LLMTimeout) as info:
                await llm.complete(MSG)
            server.latency_s = 0.0
            out = await llm.complete(MSG)  # sent once the first request has ended
            assert info.value.late is not None and info.value.late.done()
            first = await info.value.late
    first_t, second_t = server.timings
    assert second_t.arrived >= first_t.ended
    assert out.attempts == 1 and first.completion_tokens > 0


async def test_closing_the_client_cuts_requests_past_their_deadline() -> None:
    with ScriptedLLM(latency_s=1.0) as server:
        served = Served(server)
        llm = client(server.base_url, timeout_s=0.2, timeout_grace_s=5.0)
        with pytest.raises(LLMTimeout) as info:
            await llm.complete(MSG)
        late = info.value.late
        assert late is not None and not late.done()
        await llm.aclose()
        assert late.cancelled() and llm.late_requests == 0
        await served.until(1)
    assert served.rows[0][1] is True


async def test_an_attempt_the_call_failed_over_from_is_handed_over_with_the_call() -> None:
    """Timed out on a slow replica, answered by another: the usage of the answer is the answering
    replica's, and the first replica's reply (within the grace) comes with the call. The deadline
    leaves the instant replica a wide margin, so a loaded machine does not time it out too."""
    with ScriptedLLM(latency_s=3.0) as slow, ScriptedLLM(latency_s=0.0) as fast:
        async with client([slow.base_url, fast.base_url], timeout_s=1.5, timeout_grace_s=3.0) as llm:
            with affinity("debate-1"):
                llm.replicas._bind("debate-1", llm.replicas.urls[0])
                out = await llm.complete(MSG)
            state = llm.replicas.snapshot()
            assert out.attempts == 2 and len(out.late_attempts) == 1
            earlier = await out.late_attempts[0]
    assert state[0]["healthy"] is False  # a timed-out replica is taken out, as always
    assert out.prompt_tokens + out.completion_tokens == fast.tokens_served
    assert earlier.prompt_tokens + earlier.completion_tokens == slow.tokens_served > 0

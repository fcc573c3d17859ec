"""The shared retry loop: Retry-After honoured (or capped), transport errors, problem documents by type."""

from __future__ import annotations

import httpx
import pytest

from parley_wire.http import (
    RetryPolicy,
    Unreachable,
    parse_retry_after,
    read_problem,
    send_with_retries,
)

pytestmark = pytest.mark.unit


def replay(*answers: httpx.Response | Exception) -> tuple[httpx.AsyncClient, list[httpx.Request]]:
    """A client whose transport answers with ``answers`` in turn (the last one repeats)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[min(len(seen), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.AsyncClient(transport=httpx.MockTransport(handler)), seen


async def test_retry_after_is_waited_before_the_next_attempt() -> None:
    client, seen = replay(httpx.Response(503, headers={"Retry-After": "7"}), httpx.Response(200, json={}))
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    async with client:
        sent = await send_with_retries(
            lambda: client.get("http://x/"),
            policy=RetryPolicy(max_attempts=3),
            retryable=lambda r: r.status_code >= 500,
            sleep=sleep,
        )
    assert sent.response.status_code == 200 and sent.attempts == 2 and waits == [7.0] and len(seen) == 2


async def test_a_retry_after_over_the_cap_gives_up_or_is_clamped() -> None:
    answer = httpx.Response(429, headers={"Retry-After": "600"})
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    client, _ = replay(answer)
    async with client:
        sent = await send_with_retries(
            lambda: client.get("http://x/"),
            policy=RetryPolicy(max_attempts=5, retry_after_cap_s=60),
            retryable=lambda r: r.status_code == 429,
            sleep=sleep,
        )
    assert sent.attempts == 1 and sent.retry_after == 600 and waits == []
    client, _ = replay(answer, httpx.Response(200))
    async with client:
        sent = await send_with_retries(
            lambda: client.get("http://x/"),
            policy=RetryPolicy(max_attempts=5, retry_after_cap_s=60, over_cap="clamp", window_s=1e9),
            retryable=lambda r: r.status_code == 429,
            sleep=sleep,
        )
    assert sent.response.status_code == 200 and waits == [60]


async def test_transport_errors_are_retried_then_unreachable() -> None:
    client, seen = replay(httpx.ConnectError("refused"))

    async def sleep(s: float) -> None:
        return None

    async with client:
        with pytest.raises(Unreachable) as info:
            await send_with_retries(
                lambda: client.get("http://x/"),
                policy=RetryPolicy(max_attempts=3, backoff_base_s=0.001),
                retryable=lambda r: False,
                sleep=sleep,
            )
    assert info.value.attempts == 3 and len(seen) == 3


def test_problem_documents_are_read_by_type() -> None:
    resp = httpx.Response(503, json={"type": "/problems/index-missing", "title": "x", "detail": "build it"})
    problem = read_problem(resp)
    assert (problem.type, problem.detail) == ("/problems/index-missing", "build it")
    assert read_problem(httpx.Response(500, text="plain")).type == "about:blank"


def test_retry_after_parses_seconds_and_dates() -> None:
    assert parse_retry_after("3") == 3.0 and parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("soon") is None

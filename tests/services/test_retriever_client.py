"""RetrieverClient: bounded retries and typed errors, against a real local HTTP server.

The server replays the retriever's real wire format (pool JSON, RFC 9457 problems); the full service is
exercised in tests/retriever/test_app.py.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from services.knowledge import KnowledgePool
from services.retriever_client import (
    RetrieverBadRequest,
    RetrieverClient,
    RetrieverError,
    RetrieverIndexMissing,
    RetrieverUnavailable,
)
from tests.retriever.support import ReplayServer
from tests.support.scripted_llm import free_port

pytestmark = pytest.mark.unit

POOL = {
    "pool_id": "p1",
    "question": "q",
    "items": [{"n": 1, "source": "wikipedia", "title": "T", "text": "x", "url": None, "score": 0.5}],
    "warnings": [],
    "cached": False,
    "timings_ms": {"total_ms": 3.0},
}


def problem(status: int, title: str, detail: str, type_: str = "about:blank") -> dict[str, Any]:
    return {"type": type_, "title": title, "status": status, "detail": detail}


def sequence(*answers: tuple[int, Any]) -> Any:
    it = iter(answers)
    last: list[tuple[int, Any]] = []

    def respond(method: str, path: str, body: bytes) -> tuple[int, Any, float]:
        with contextlib.suppress(StopIteration):  # the last answer repeats
            last[:] = [next(it)]
        status, payload = last[0]
        return status, payload, 0.0

    return respond


def client(url: str, attempts: int = 3) -> RetrieverClient:
    return RetrieverClient(url, timeout_s=5, max_attempts=attempts, backoff_base_s=0.01, backoff_max_s=0.02)


async def test_retries_5xx_then_succeeds() -> None:
    with ReplayServer(sequence((502, "bad gateway"), (500, problem(500, "Oops", "x")), (200, POOL))) as srv:
        async with client(srv.url) as c:
            pool = await c.build_pool("q", 2, 1)
    assert isinstance(pool, KnowledgePool) and pool.items[0].title == "T"
    assert len(srv.requests) == 3
    assert srv.requests[0][0] == "POST" and srv.requests[0][1] == "/v1/pools"


async def test_persistent_5xx_is_unavailable_after_max_attempts() -> None:
    with ReplayServer(sequence((500, problem(500, "Internal", "boom")))) as srv:
        async with client(srv.url, attempts=2) as c:
            with pytest.raises(RetrieverUnavailable) as info:
                await c.build_pool("q")
    assert len(srv.requests) == 2
    assert srv.url in str(info.value) and "boom" in str(info.value)


async def test_connection_refused_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with client(url, attempts=2) as c:
        with pytest.raises(RetrieverUnavailable, match=url.replace(".", r"\.")):
            await c.build_pool("q")


async def test_4xx_fails_at_once_with_detail() -> None:
    with ReplayServer(
        sequence((422, problem(422, "Invalid request", "k_wiki must be between 0 and 50")))
    ) as srv:
        async with client(srv.url) as c:
            with pytest.raises(RetrieverBadRequest, match="k_wiki must be between") as info:
                await c.build_pool("q", 99)
    assert info.value.status == 422 and len(srv.requests) == 1


async def test_index_missing_is_not_retried() -> None:
    # Told apart by its type: a different title (a translated one, say) changes nothing.
    body = problem(
        503,
        "Index fehlt",
        "the Wikipedia index is empty: run `parley index build`",
        "/problems/index-missing",
    )
    with ReplayServer(sequence((503, body))) as srv:
        async with client(srv.url) as c:
            with pytest.raises(RetrieverIndexMissing, match="parley index build"):
                await c.build_pool("q")
    assert len(srv.requests) == 1


async def test_get_pool_404_is_none_and_malformed_pool_is_an_error() -> None:
    with ReplayServer(sequence((404, problem(404, "Pool not found", "no pool")), (200, {"nope": 1}))) as srv:
        async with client(srv.url) as c:
            assert await c.get_pool("missing") is None
            with pytest.raises(RetrieverError, match="malformed"):
                await c.get_pool("p1")


async def test_a_title_alone_is_not_an_index_missing() -> None:
    # An "Index not built" title without the problem type is an ordinary 503: retried, then unavailable.
    body = problem(503, "Index not built", "the index is empty")
    with ReplayServer(sequence((503, body))) as srv:
        async with client(srv.url, attempts=2) as c:
            with pytest.raises(RetrieverUnavailable):
                await c.build_pool("q")
    assert len(srv.requests) == 2

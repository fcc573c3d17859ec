"""Each web search provider against a local HTTP server replaying that provider's real JSON shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from retriever.websearch import (
    BraveSearch,
    SearxngSearch,
    SerperSearch,
    WebSearchBadResponse,
    WebSearchTimeout,
    WebSearchUnavailable,
    clean_snippet,
)
from tests.retriever.support import WEB_RESULTS, ReplayServer, brave_body, searxng_body, serper_body

pytestmark = pytest.mark.unit


def _ok(body: dict[str, Any]) -> Any:
    return lambda method, path, raw: (200, body, 0.0)


async def test_serper_posts_query_with_key_and_maps_organic_results() -> None:
    with ReplayServer(_ok(serper_body(WEB_RESULTS))) as srv:
        s = SerperSearch("secret-key", url=srv.url + "/search", timeout_s=5)
        res = await s.search("who painted the mona lisa", 2)
        await s.aclose()
    method, path, headers, raw = srv.requests[0]
    assert method == "POST" and path == "/search"
    assert {k.lower(): v for k, v in headers.items()}["x-api-key"] == "secret-key"
    assert json.loads(raw)["q"] == "who painted the mona lisa"
    assert [r.title for r in res] == ["Mona Lisa - Wikipedia", "Mona Lisa | Louvre"]
    assert res[0].url == "https://en.wikipedia.org/wiki/Mona_Lisa" and res[0].rank == 1
    assert res[1].snippet.startswith("Leonardo's portrait")  # knowledgeGraph/peopleAlsoAsk ignored


async def test_searxng_uses_json_format_and_maps_content() -> None:
    with ReplayServer(_ok(searxng_body(WEB_RESULTS))) as srv:
        s = SearxngSearch(srv.url + "/", timeout_s=5)
        res = await s.search("mona lisa", 5)
        await s.aclose()
    method, path, _, _ = srv.requests[0]
    assert method == "GET" and path.startswith("/search?") and "format=json" in path and "q=mona+lisa" in path
    assert len(res) == 3
    assert res[2].snippet == WEB_RESULTS[2][1] and res[2].url == WEB_RESULTS[2][2]


async def test_brave_sends_token_and_strips_highlighting() -> None:
    with ReplayServer(_ok(brave_body(WEB_RESULTS))) as srv:
        s = BraveSearch("tok", url=srv.url + "/res/v1/web/search", timeout_s=5)
        res = await s.search("mona lisa", 3)
        await s.aclose()
    _, path, headers, _ = srv.requests[0]
    assert {k.lower(): v for k, v in headers.items()}["x-subscription-token"] == "tok"
    assert "count=3" in path
    assert res[1].snippet == WEB_RESULTS[1][1]  # <strong> removed, &amp; unescaped
    assert "<strong>" not in " ".join(r.snippet for r in res)


def test_clean_snippet() -> None:
    assert clean_snippet("The <strong>Apollo&nbsp;11</strong>  &amp; crew") == "The Apollo 11 & crew"
    assert clean_snippet(None) == ""


@pytest.mark.parametrize(
    ("provider", "fault", "error"),
    [
        ("serper", (500, {"message": "internal"}, 0.0), WebSearchUnavailable),
        ("serper", (403, {"message": "Unauthorized."}, 0.0), WebSearchUnavailable),
        ("searxng", (200, "{not json", 0.0), WebSearchBadResponse),
        ("searxng", (200, {"results": [1, 2]}, 0.0), WebSearchBadResponse),
        ("brave", (200, {"web": "x"}, 0.0), WebSearchBadResponse),
        ("brave", (200, brave_body(WEB_RESULTS), 2.0), WebSearchTimeout),
    ],
)
async def test_provider_faults_raise_typed_errors(provider: str, fault: Any, error: type[Exception]) -> None:
    with ReplayServer(lambda m, p, b: fault) as srv:
        s: Any
        if provider == "serper":
            s = SerperSearch("k", url=srv.url, timeout_s=0.5)
        elif provider == "searxng":
            s = SearxngSearch(srv.url, timeout_s=0.5)
        else:
            s = BraveSearch("k", url=srv.url, timeout_s=0.5)
        with pytest.raises(error) as info:
            await s.search("q", 3)
        await s.aclose()
    assert provider in str(info.value)


async def test_unreachable_provider_is_unavailable() -> None:
    from tests.support.scripted_llm import free_port

    s = SearxngSearch(f"http://127.0.0.1:{free_port()}", timeout_s=1)
    with pytest.raises(WebSearchUnavailable):
        await s.search("q", 3)
    await s.aclose()

"""The retriever service over real HTTP (uvicorn on a free port), with a SearXNG-shaped web provider."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from retriever.app import create_app
from services.retriever_client import RetrieverBadRequest, RetrieverClient, RetrieverIndexMissing
from tests.retriever.support import (
    WEB_RESULTS,
    AppServer,
    ReplayServer,
    copy_index,
    searxng_body,
    slice_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def web() -> Iterator[ReplayServer]:
    with ReplayServer(lambda m, p, b: (200, searxng_body(WEB_RESULTS), 0.0)) as srv:
        yield srv


@pytest.fixture(scope="module")
def service(built_index: Path, tmp_path_factory: pytest.TempPathFactory, web: ReplayServer) -> Iterator[str]:
    data = copy_index(built_index, tmp_path_factory.mktemp("app") / "index")
    settings = slice_settings(data, web_provider="searxng", searxng_url=web.url, warmup=True)
    with AppServer(create_app(settings)) as srv:
        yield srv.url


def test_healthz_reports_ready_hybrid(service: str) -> None:
    h = httpx.get(service + "/healthz").json()
    assert h["index_ready"] and h["passages"] > 0
    assert h["bm25"] and h["mode"] == "hybrid" and h["web_provider"] == "searxng"


def test_post_pool_then_get_and_cache(service: str) -> None:
    r = httpx.post(
        service + "/v1/pools", json={"question": "Who painted the Mona Lisa?", "k_wiki": 3, "k_web": 3}
    )
    assert r.status_code == 200
    pool = r.json()
    assert set(pool) >= {"pool_id", "question", "items", "warnings", "cached", "timings_ms"}
    items = pool["items"]
    assert [it["n"] for it in items] == list(range(1, len(items) + 1))
    assert [it["source"] for it in items[:3]] == ["wikipedia"] * 3 and items[0]["title"] == "Mona Lisa"
    assert {it["source"] for it in items[3:]} == {"web"}
    assert all(set(it) == {"n", "source", "title", "text", "url", "score", "found_by"} for it in items)
    assert all(it["found_by"] is None for it in items)  # set only on items a debater's search adds
    got = httpx.get(f"{service}/v1/pools/{pool['pool_id']}").json()
    assert [it["text"] for it in got["items"]] == [it["text"] for it in items]
    again = httpx.post(
        service + "/v1/pools", json={"question": "who painted the mona lisa", "k_wiki": 3, "k_web": 3}
    )
    assert again.json()["cached"] and again.json()["pool_id"] == pool["pool_id"]


async def test_concurrent_posts_share_one_pool(service: str) -> None:
    async with httpx.AsyncClient(base_url=service, timeout=60) as c:
        rs = await asyncio.gather(
            *(
                c.post("/v1/pools", json={"question": "what is the capital of japan", "k_wiki": 4})
                for _ in range(6)
            )
        )
    assert {r.status_code for r in rs} == {200}
    assert len({r.json()["pool_id"] for r in rs}) == 1
    assert sum(not r.json()["cached"] for r in rs) == 1


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_search_modes(service: str, mode: str) -> None:
    r = httpx.get(service + "/v1/search", params={"q": "highest mountain on earth", "k": 3, "mode": mode})
    assert r.status_code == 200
    body = r.json()
    assert body["mode"] == mode and len(body["hits"]) == 3
    assert body["hits"][0]["title"] == "Mount Everest"


@pytest.mark.parametrize(
    "body",
    [
        {"question": ""},
        {"question": "   "},
        {"question": "x" * 5000},
        {"question": "ok", "k_wiki": 51},
        {"question": "ok", "k_web": -1},
        {"k_wiki": 3},
    ],
    ids=["empty", "blank", "huge", "k_wiki>50", "k_web<0", "missing"],
)
def test_bad_pool_requests_are_422_problems(service: str, body: dict[str, object]) -> None:
    r = httpx.post(service + "/v1/pools", json=body)
    assert r.status_code == 422
    assert r.headers["content-type"].startswith(PROBLEM)
    p = r.json()
    assert p["status"] == 422 and p["title"] and p["detail"]


def test_search_text_over_the_limit_is_a_422_problem_naming_it(service: str) -> None:
    body = {"question": "Who painted the Mona Lisa?", "search_text": "x" * 4001}
    r = httpx.post(service + "/v1/pools", json=body)
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)
    assert r.json()["detail"] == "search_text is 4001 characters; the limit is 4000"
    assert httpx.post(service + "/v1/pools", json={**body, "search_text": 5}).status_code == 422


@pytest.mark.parametrize(
    "raw",
    [
        b'{"question": "who painted the mona lisa", "k_web": 0, '
        b'"search_text": "\\"Leonardo\\" title:da (Vinci) AND -NOT +x~2 ^3 [a TO b] \\\\"}',
        b'{"question": "who painted the mona lisa", "k_web": 0, "search_text": "lone \\ud800 surrogate"}',
        b'{"question": "who \\udfff painted the mona lisa", "k_web": 0}',
        b'{"question": "who painted the mona lisa", "k_web": 0, "search_text": "' + b"y " * 2000 + b'"}',
    ],
    ids=["lucene-syntax", "surrogate-in-search-text", "surrogate-in-question", "4000-chars"],
)
def test_odd_search_text_is_searched_never_a_500(service: str, raw: bytes) -> None:
    r = httpx.post(
        service + "/v1/pools", content=raw, headers={"content-type": "application/json"}, timeout=60
    )
    # The JSON parser refuses some lone surrogates itself (a 422); what it lets through is searched.
    assert r.status_code in (200, 422), r.text
    if r.status_code == 422:
        assert r.headers["content-type"].startswith(PROBLEM) and b"\\ud" in raw
    else:
        assert r.json()["items"]


async def test_client_sends_the_search_text(service: str) -> None:
    async with RetrieverClient(service, timeout_s=60) as client:
        plain = await client.build_pool("which one is it", k_wiki=2, k_web=0)
        passage = "Mount Everest is the highest mountain on Earth, in the Himalayas."
        searched = await client.build_pool("which one is it", k_wiki=2, k_web=0, search_text=passage)
        again = await client.build_pool("which one is it", k_wiki=2, k_web=0, search_text=passage)
    assert searched.items[0].title == "Mount Everest" and searched.question == "which one is it"
    assert searched.pool_id != plain.pool_id
    assert again.cached and again.items == searched.items


@pytest.mark.parametrize("params", [{"q": "x", "k": 51}, {"q": ""}, {"q": "x", "mode": "magic"}])
def test_bad_search_requests_are_422_problems(service: str, params: dict[str, str | int]) -> None:
    r = httpx.get(service + "/v1/search", params=params)
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)


def test_unknown_pool_is_404_problem(service: str) -> None:
    r = httpx.get(service + "/v1/pools/does-not-exist")
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)


async def test_client_against_real_service(service: str) -> None:
    async with RetrieverClient(service, timeout_s=60) as client:
        pool = await client.build_pool("who discovered penicillin", k_wiki=2, k_web=1)
        assert [it.source for it in pool.items] == ["wikipedia", "wikipedia", "web"]
        assert (await client.get_pool(pool.pool_id)) is not None
        assert await client.get_pool("nope") is None
        with pytest.raises(RetrieverBadRequest) as info:
            await client.build_pool("", 5, 5)
        assert info.value.status == 422


async def test_missing_index_is_503_with_build_hint(tmp_path: Path) -> None:
    settings = slice_settings(tmp_path / "nothing")
    with AppServer(create_app(settings)) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as c:
            h = (await c.get("/healthz")).json()
            assert h["index_ready"] is False and h["status"] == "no_index"
            r = await c.post("/v1/pools", json={"question": "who painted the mona lisa"})
            assert r.status_code == 503 and r.headers["content-type"].startswith(PROBLEM)
            assert "parley index build" in r.json()["detail"]
            s = await c.get("/v1/search", params={"q": "mona lisa"})
            assert s.status_code == 503
        async with RetrieverClient(srv.url, max_attempts=3) as client:
            with pytest.raises(RetrieverIndexMissing, match="parley index build"):
                await client.build_pool("who painted the mona lisa")


def test_metrics_need_the_token_when_one_is_set(empty_settings: object) -> None:
    from pydantic import SecretStr

    from retriever.settings import RetrieverSettings

    assert isinstance(empty_settings, RetrieverSettings)
    settings = empty_settings.model_copy(update={"metrics_token": SecretStr("scrape-me")})
    with AppServer(create_app(settings)) as srv:
        assert httpx.get(srv.url + "/healthz").status_code == 200
        refused = httpx.get(srv.url + "/metrics")
        assert refused.status_code == 401 and refused.headers["content-type"] == PROBLEM
        scraped = httpx.get(srv.url + "/metrics", headers={"authorization": "Bearer scrape-me"})
        assert (
            scraped.status_code == 200
            and "parley_http_requests_total" in scraped.text
            and 'route="/healthz"' in scraped.text
        )

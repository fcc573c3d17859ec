"""Web search providers for the shared knowledge pool: Serper (Google SERP), SearXNG and Brave Search.

As in the MADKE paper (§3.1.1), only the title and the short description (snippet) of each result
enter the pool, never the page content: pages are long and noisy, snippets are what the agents can
choose between. Every provider maps its own JSON shape to ``WebResult`` and raises a typed
``WebSearchError`` for timeouts, transport failures, non-2xx answers and malformed JSON, so that the
pool builder can fall back to Wikipedia-only with a warning. No retries here: a pool must come back
quickly, and a second try against a provider that just timed out rarely pays for its latency.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class WebResult:
    title: str
    snippet: str
    url: str | None
    rank: int


class WebSearchError(Exception):
    """A provider failed; ``provider`` names it, the message says how."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider


class WebSearchTimeout(WebSearchError):
    """The provider did not answer within the timeout."""


class WebSearchUnavailable(WebSearchError):
    """Connection failure or an HTTP error status (401/403/429/5xx…)."""


class WebSearchBadResponse(WebSearchError):
    """The provider answered 2xx but not with the JSON shape it documents."""


class WebSearch(Protocol):
    """Anything that returns the top-k web results (title + snippet) for a query."""

    name: str

    async def search(self, query: str, k: int) -> list[WebResult]: ...

    async def aclose(self) -> None: ...


def clean_snippet(text: Any) -> str:
    """Plain text from a provider snippet: Brave and SearXNG may embed ``<strong>`` tags and entities."""
    return " ".join(html.unescape(_TAG.sub("", str(text or ""))).split())


class _HttpProvider:
    """One HTTP search API: each provider says how to ask (``_query``), where its result list sits
    (``_rows``) and which fields are title, snippet and URL; sending, errors and mapping are shared."""

    name = "web"
    fields: tuple[str, str, str] = ("title", "snippet", "url")  # a result's title, snippet and URL keys

    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeout = httpx.Timeout(timeout_s)
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=self._timeout, transport=transport)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def search(self, query: str, k: int) -> list[WebResult]:
        """The top-k results (title + snippet) for ``query``; a typed ``WebSearchError`` when it fails."""
        if k <= 0:
            return []
        data = await self._send(self._query(query, k))
        if not isinstance(data, dict):
            raise WebSearchBadResponse(self.name, "expected a JSON object")
        return self._results(self._rows(data), k=k)

    def _query(self, query: str, k: int) -> httpx.Request:
        raise NotImplementedError

    def _rows(self, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def _send(self, request: httpx.Request) -> Any:
        try:
            resp = await self._client.send(request)
        except httpx.TimeoutException as exc:
            raise WebSearchTimeout(self.name, f"no answer within {self._timeout.read}s") from exc
        except httpx.TransportError as exc:
            raise WebSearchUnavailable(self.name, f"cannot reach {request.url.host}: {exc!r}") from exc
        if resp.status_code >= 300:
            raise WebSearchUnavailable(self.name, f"HTTP {resp.status_code}: {resp.text[:200]!r}")
        try:
            return resp.json()
        except ValueError as exc:
            raise WebSearchBadResponse(self.name, f"not JSON: {resp.text[:200]!r}") from exc

    def _request(self, method: str, url: str, **kw: Any) -> httpx.Request:
        return self._client.build_request(method, url, timeout=self._timeout, **kw)

    def _results(self, rows: Any, *, k: int) -> list[WebResult]:
        if not isinstance(rows, list):
            raise WebSearchBadResponse(self.name, f"expected a list of results, got {type(rows).__name__}")
        title, snippet, url = self.fields
        out: list[WebResult] = []
        for row in rows:
            if not isinstance(row, dict):
                raise WebSearchBadResponse(self.name, "a result is not an object")
            text = clean_snippet(row.get(snippet))
            head = clean_snippet(row.get(title))
            if not text and not head:
                continue
            out.append(WebResult(title=head, snippet=text, url=row.get(url) or None, rank=len(out) + 1))
            if len(out) >= k:
                break
        return out


class SerperSearch(_HttpProvider):
    """Google SERP through serper.dev, the provider the paper used (``organic[].title/snippet/link``)."""

    name = "serper"
    fields = ("title", "snippet", "link")

    def __init__(self, api_key: str, *, url: str = "https://google.serper.dev/search", **kw: Any) -> None:
        super().__init__(**kw)
        self._key = api_key
        self._url = url

    def _query(self, query: str, k: int) -> httpx.Request:
        # Serper returns 10 by default; ``num`` asks for k.
        return self._request(
            "POST", self._url, json={"q": query, "num": max(k, 10)}, headers={"X-API-KEY": self._key}
        )

    def _rows(self, data: dict[str, Any]) -> Any:
        return data.get("organic", [])


class SearxngSearch(_HttpProvider):
    """A self-hosted SearXNG instance's JSON API (``/search?format=json``; ``results[].title/content/url``).

    The instance must allow the json format (``search.formats: [html, json]`` in its settings.yml).
    """

    name = "searxng"
    fields = ("title", "content", "url")

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(**kw)
        self._url = base_url.rstrip("/") + "/search"

    def _query(self, query: str, k: int) -> httpx.Request:
        return self._request("GET", self._url, params={"q": query, "format": "json"})

    def _rows(self, data: dict[str, Any]) -> Any:
        return data.get("results", [])


class BraveSearch(_HttpProvider):
    """Brave Search API (``web.results[].title/description/url``; token in ``X-Subscription-Token``)."""

    name = "brave"
    fields = ("title", "description", "url")

    def __init__(
        self, api_key: str, *, url: str = "https://api.search.brave.com/res/v1/web/search", **kw: Any
    ) -> None:
        super().__init__(**kw)
        self._key = api_key
        self._url = url

    def _query(self, query: str, k: int) -> httpx.Request:
        return self._request(
            "GET",
            self._url,
            params={"q": query, "count": min(max(k, 1), 20)},
            headers={"X-Subscription-Token": self._key, "Accept": "application/json"},
        )

    def _rows(self, data: dict[str, Any]) -> Any:
        web = data.get("web") or {}
        if not isinstance(web, dict):
            raise WebSearchBadResponse(self.name, "'web' is not an object")
        return web.get("results", [])

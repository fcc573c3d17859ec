"""HTTP client of the retrieval service: how workers (and ``parley ask`` with a URL) get knowledge pools.

It implements ``services.knowledge.PoolBuilder``. Retries live here, bounded: connection errors,
timeouts and 5xx are retried with exponential backoff and jitter; 4xx fail at once. A 503 whose problem
title says the index is not built is not retried either — waiting does not build an index — and
surfaces as ``RetrieverIndexMissing`` with the service's how-to-build message.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from services.knowledge import KnowledgePool


class RetrieverError(Exception):
    """The retriever answered with an error (the problem detail is in the message)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetrieverUnavailable(RetrieverError):
    """The retriever could not be reached, or kept failing with 5xx, after all attempts."""


class RetrieverIndexMissing(RetrieverError):
    """The retriever runs but has no index yet (HTTP 503 "Index not built")."""


class RetrieverBadRequest(RetrieverError):
    """The request was rejected (HTTP 4xx, e.g. 422 for an empty question or k out of range)."""


def _problem_detail(resp: httpx.Response) -> tuple[str, str]:
    try:
        body = resp.json()
    except ValueError:
        return "", resp.text[:300]
    if isinstance(body, dict):
        return str(body.get("title", "")), str(body.get("detail", body))[:500]
    return "", str(body)[:300]


class RetrieverClient:
    """``PoolBuilder`` over HTTP: ``await client.build_pool(question)``; close with ``aclose()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_base_s: float = 0.2,
        backoff_max_s: float = 5.0,
        retry_window_s: float = 300.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._max_attempts = max(1, max_attempts)
        # A restart of the retriever (about a minute) is waited out; only a longer outage fails.
        self._window_s = retry_window_s
        self._backoff = (backoff_base_s, backoff_max_s)
        self._own = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)), transport=transport
        )

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def __aenter__(self) -> RetrieverClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        url = self.base_url + path
        last = ""
        first = time.monotonic()
        attempt = 0
        for attempt in range(1, self._max_attempts + 1):
            try:
                resp = await self._client.request(method, url, **kw)
            except httpx.TransportError as exc:  # connect refused, reset, timeouts
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 500:
                    return resp
                title, detail = _problem_detail(resp)
                if resp.status_code == 503 and title == "Index not built":
                    raise RetrieverIndexMissing(f"retriever at {self.base_url}: {detail}", status=503)
                last = f"HTTP {resp.status_code}: {detail}"
            base, cap = self._backoff
            delay = random.uniform(0, min(cap, base * 2 ** (attempt - 1)))
            if attempt >= self._max_attempts or time.monotonic() - first + delay > self._window_s:
                break
            await asyncio.sleep(delay)
        raise RetrieverUnavailable(
            f"retriever at {self.base_url} unavailable after {attempt} attempts over "
            f"{time.monotonic() - first:.0f}s ({last})"
        )

    @staticmethod
    def _raise_for_4xx(resp: httpx.Response, base_url: str) -> None:
        if resp.status_code >= 400:
            _, detail = _problem_detail(resp)
            raise RetrieverBadRequest(
                f"retriever at {base_url} rejected the request (HTTP {resp.status_code}): {detail}",
                status=resp.status_code,
            )

    def _parse_pool(self, resp: httpx.Response) -> KnowledgePool:
        try:
            return KnowledgePool.model_validate(resp.json())
        except ValueError as exc:
            raise RetrieverError(f"retriever at {self.base_url} sent a malformed pool: {exc}") from exc

    async def build_pool(self, question: str, k_wiki: int = 5, k_web: int = 5) -> KnowledgePool:
        """SKPool(question) from the service (cached there by normalised question and parameters)."""
        resp = await self._request(
            "POST", "/v1/pools", json={"question": question, "k_wiki": k_wiki, "k_web": k_web}
        )
        self._raise_for_4xx(resp, self.base_url)
        return self._parse_pool(resp)

    async def get_pool(self, pool_id: str) -> KnowledgePool | None:
        """A stored pool by id, or None when unknown or expired (HTTP 404)."""
        resp = await self._request("GET", f"/v1/pools/{pool_id}")
        if resp.status_code == 404:
            return None
        self._raise_for_4xx(resp, self.base_url)
        return self._parse_pool(resp)

    async def health(self) -> dict[str, Any]:
        """The service's ``/healthz`` body (``index_ready``, ``passages``, ``mode``, …)."""
        resp = await self._request("GET", "/healthz")
        self._raise_for_4xx(resp, self.base_url)
        data: dict[str, Any] = resp.json()
        return data

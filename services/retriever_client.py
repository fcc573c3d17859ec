"""HTTP client of the retrieval service: how workers (and ``parley ask`` with a URL) get knowledge pools.

It implements ``services.knowledge.PoolBuilder``. Retries are the shared loop of
``parley_wire.http``, bounded: connection errors, timeouts and 5xx are retried with exponential
backoff and jitter (a ``Retry-After`` wins); 4xx fail at once. A 503 whose problem ``type`` is
``/problems/index-missing`` is not retried either (waiting does not build an index) and surfaces as
``RetrieverIndexMissing`` with the service's how-to-build message.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from parley_wire.http import HttpClientHolder, RetryPolicy, Unreachable, read_problem, send_with_retries
from services.knowledge import KnowledgePool
from services.problem_details import INDEX_MISSING


class RetrieverError(Exception):
    """The retriever answered with an error (the problem detail is in the message)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetrieverUnavailable(RetrieverError):
    """The retriever could not be reached, or kept failing with 5xx, after all attempts."""


class RetrieverIndexMissing(RetrieverError):
    """The retriever runs but has no index yet (HTTP 503, problem type ``/problems/index-missing``)."""


class RetrieverBadRequest(RetrieverError):
    """The request was rejected (HTTP 4xx, e.g. 422 for an empty question or k out of range)."""


class RetrieverClient(HttpClientHolder):
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
        token: str | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``token``: the retriever's ``PARLEY_RETRIEVER_TOKEN``, sent with every call; ``verify``: the
        TLS check of an ``https://`` URL (``services.tls.client_verify``)."""
        self.base_url = base_url.rstrip("/")
        # A restart of the retriever (about a minute) is waited out; only a longer outage fails.
        self._policy = RetryPolicy(
            max_attempts=max(1, max_attempts),
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            window_s=retry_window_s,
        )
        super().__init__(
            client,
            timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)),
            transport=transport,
            verify=verify,
        )
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _retryable(self, resp: httpx.Response) -> bool:
        if resp.status_code < 500:
            return False
        problem = read_problem(resp)
        if problem.type == INDEX_MISSING:
            raise RetrieverIndexMissing(f"retriever at {self.base_url}: {problem.detail}", status=503)
        return True

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        url = self.base_url + path
        try:
            sent = await send_with_retries(
                lambda: self._client.request(method, url, headers=self._headers, **kw),
                policy=self._policy,
                retryable=self._retryable,
            )
        except Unreachable as exc:
            raise RetrieverUnavailable(
                f"retriever at {self.base_url} unavailable after {exc.attempts} attempts over "
                f"{exc.elapsed_s:.0f}s ({exc})"
            ) from exc
        resp = sent.response
        if resp.status_code >= 500:
            raise RetrieverUnavailable(
                f"retriever at {self.base_url} unavailable after {sent.attempts} attempts over "
                f"{sent.elapsed_s:.0f}s (HTTP {resp.status_code}: {read_problem(resp).detail})"
            )
        return resp

    @staticmethod
    def _raise_for_4xx(resp: httpx.Response, base_url: str) -> None:
        if resp.status_code >= 400:
            detail = read_problem(resp).detail
            raise RetrieverBadRequest(
                f"retriever at {base_url} rejected the request (HTTP {resp.status_code}): {detail}",
                status=resp.status_code,
            )

    def _parse_pool(self, resp: httpx.Response) -> KnowledgePool:
        try:
            return KnowledgePool.model_validate(resp.json())
        except ValueError as exc:
            raise RetrieverError(f"retriever at {self.base_url} sent a malformed pool: {exc}") from exc

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> KnowledgePool:
        """SKPool(question) from the service (cached there by normalised question and parameters);
        ``search_text`` is searched after the question (sent only when given)."""
        body: dict[str, Any] = {"question": question, "k_wiki": k_wiki, "k_web": k_web}
        if search_text is not None:
            body["search_text"] = search_text
        resp = await self._request("POST", "/v1/pools", json=body)
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

"""The one client of the Parley gateway: ``parley submit`` and ``parley eval --api`` both use it.

Contract (the gateway's): ``POST /v1/debates`` and ``POST /v1/batches`` (JSON items or a JSONL
upload) → 202; ``GET /v1/batches/{id}`` → ``{"batch_id", "status": queued|running|completed, "total",
"counts": {job status: n}, "progress"}``; ``GET /v1/batches/{id}/results`` → NDJSON, one line per
item in input order. Errors are RFC 9457 problem+json; 429 and 503 carry ``Retry-After``, which the
client honours (up to ``max_waits`` times) before giving up.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.jobstore import TERMINAL
from services.settings import ParleySettings


class GatewayClientSettings(ParleySettings):
    """How command-line clients reach the gateway: ``PARLEY_API_URL`` and ``PARLEY_API_KEY``."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_API_", frozen=True, extra="ignore")

    url: str = "http://127.0.0.1:8000"
    key: SecretStr | None = None
    client_timeout_s: float = Field(default=60.0, gt=0)


class GatewayError(Exception):
    """A problem+json answer from the gateway (``status``, ``detail``, the whole ``problem``), or no
    answer at all (``status`` None)."""

    def __init__(self, status: int | None, detail: str, problem: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}" if status is not None else detail)
        self.status = status
        self.detail = detail
        self.problem = problem or {}


class GatewayNotFound(GatewayError):
    """The gateway does not know the job or batch (wrong id, another key's, or its store was wiped)."""


def finished_count(status: dict[str, Any]) -> int:
    """Items of a batch status document that reached a terminal job status."""
    counts = status.get("counts") or {}
    return sum(int(counts.get(k, 0) or 0) for k in TERMINAL)


class GatewayClient:
    """Submit debates and batches, poll them and read results. Pass ``transport`` or ``client`` to
    control the network; an API key goes in the ``Authorization`` header of every request."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_waits: int = 20,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns = client is None
        self._client = client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )
        if client is not None and api_key:
            self._client.headers.update(headers)
        self._max_waits = max_waits
        self._sleep = sleep

    @classmethod
    def from_settings(cls, settings: GatewayClientSettings, url: str | None = None) -> GatewayClient:
        key = settings.key.get_secret_value() if settings.key else None
        return cls(url or settings.url, api_key=key, timeout_s=settings.client_timeout_s)

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(self._max_waits + 1):
            try:
                resp = await self._client.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                raise GatewayError(None, f"cannot reach the Parley API ({type(exc).__name__})") from exc
            wait = resp.headers.get("retry-after")
            if resp.status_code in (429, 503) and wait is not None and attempt < self._max_waits:
                await self._sleep(min(60.0, float(wait)))
                continue
            break
        if resp.status_code >= 400:
            raise _error(resp, method, path)
        return resp

    async def submit_debate(
        self,
        question: str,
        config: dict[str, Any] | None = None,
        answers: list[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"question": question, "config": config or {}}
        if answers is not None:
            body["answers"] = answers
        return await self._json("POST", "/v1/debates", json=body, headers=_idempotency(idempotency_key))

    async def get_debate(self, job_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/debates/{job_id}")

    async def submit_batch(
        self,
        items: list[dict[str, Any]],
        config: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Enqueue ``items`` (``{id?, question, answers?, pool?}``) as one batch; the 202 body."""
        body = {"items": items, "config": config or {}}
        return await self._json("POST", "/v1/batches", json=body, headers=_idempotency(idempotency_key))

    async def submit_batch_file(
        self, path: Path, config: dict[str, Any] | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Upload a JSONL file of ``{id?, question, answers?}`` lines as one batch."""
        content = await asyncio.to_thread(path.read_bytes)
        files = {"file": (path.name, content, "application/x-ndjson")}
        data = {"config": json.dumps(config or {})}
        return await self._json(
            "POST", "/v1/batches", files=files, data=data, headers=_idempotency(idempotency_key)
        )

    async def get_batch(self, batch_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/batches/{batch_id}")

    async def wait_batch(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Poll until every item finished; ``on_progress`` sees each status document.
        ``TimeoutError`` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = await self.get_batch(batch_id)
            if on_progress is not None:
                on_progress(status)
            if status.get("status") == "completed":
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id} not finished after {timeout_s}s")
            await self._sleep(poll_s)

    async def iter_results(self, batch_id: str) -> AsyncIterator[dict[str, Any]]:
        """The batch's result lines in input order, streamed; an unreadable line is yielded as a
        failed entry (``{"id": None, "error": ...}``), never dropped."""
        path = f"/v1/batches/{batch_id}/results"
        async with self._client.stream("GET", path) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise _error(resp, "GET", path)
            n = 0
            async for raw in resp.aiter_lines():
                n += 1
                if not raw.strip():
                    continue
                try:
                    yield json.loads(raw)
                except json.JSONDecodeError:
                    yield {"id": None, "status": "failed", "error": f"unreadable results line {n}"}

    async def results(self, batch_id: str) -> list[dict[str, Any]]:
        return [line async for line in self.iter_results(batch_id)]

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        data: dict[str, Any] = (await self._request(method, path, **kwargs)).json()
        return data


def _idempotency(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key else {}


def _error(resp: httpx.Response, method: str, path: str) -> GatewayError:
    problem: dict[str, Any] | None = None
    try:
        body = resp.json()
        problem = body if isinstance(body, dict) else None
        detail = str((problem or {}).get("detail") or (problem or {}).get("title") or resp.text[:300])
    except ValueError:
        detail = resp.text[:300] or f"{method} {path} failed"
    cls = GatewayNotFound if resp.status_code == 404 else GatewayError
    return cls(resp.status_code, detail, problem)

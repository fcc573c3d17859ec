"""A small synchronous client of the Parley API (``parley submit`` and evaluation scripts use it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.settings import ParleySettings


class ApiClientSettings(ParleySettings):
    """How command-line clients reach the API: ``PARLEY_API_URL`` and ``PARLEY_API_KEY``."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_API_", frozen=True, extra="ignore")

    url: str = "http://127.0.0.1:8000"
    key: SecretStr | None = None
    client_timeout_s: float = Field(default=60.0, gt=0)


class ApiError(Exception):
    """A problem+json answer from the API, or no answer at all."""

    def __init__(self, status: int, detail: str, problem: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.problem = problem or {}


class ParleyClient:
    """Submit debates and batches, poll them and read results; retries 429/503 after ``Retry-After``."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        max_waits: int = 20,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )
        self._max_waits = max_waits

    @classmethod
    def from_settings(cls, settings: ApiClientSettings) -> ParleyClient:
        key = settings.key.get_secret_value() if settings.key else None
        return cls(settings.url, api_key=key, timeout_s=settings.client_timeout_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ParleyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        for _ in range(self._max_waits):
            resp = self._client.request(method, url, **kwargs)
            if resp.status_code in (429, 503) and "retry-after" in resp.headers:
                time.sleep(min(60.0, float(resp.headers["retry-after"])))
                continue
            break
        if resp.status_code >= 400:
            try:
                problem = resp.json()
                detail = str(problem.get("detail", resp.text))
            except ValueError:
                problem, detail = None, resp.text[:300]
            raise ApiError(resp.status_code, detail, problem)
        return resp

    def submit_debate(
        self,
        question: str,
        config: dict[str, Any] | None = None,
        answers: list[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"question": question, "config": config or {}}
        if answers is not None:
            body["answers"] = answers
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        result: dict[str, Any] = self._request("POST", "/v1/debates", json=body, headers=headers).json()
        return result

    def get_debate(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/v1/debates/{job_id}").json()
        return result

    def submit_batch_file(
        self, path: Path, config: dict[str, Any] | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Upload a JSONL file of ``{id?, question, answers?}`` lines as one batch."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        with path.open("rb") as fh:
            files = {"file": (path.name, fh, "application/x-ndjson")}
            data = {"config": json.dumps(config or {})}
            result: dict[str, Any] = self._request(
                "POST", "/v1/batches", files=files, data=data, headers=headers
            ).json()
        return result

    def submit_batch(
        self, items: list[dict[str, Any]], config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", "/v1/batches", json={"items": items, "config": config or {}}
        ).json()
        return result

    def get_batch(self, batch_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/v1/batches/{batch_id}").json()
        return result

    def wait_batch(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Poll until every item finished; ``on_progress`` sees each status document."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.get_batch(batch_id)
            if on_progress is not None:
                on_progress(status)
            if status["status"] == "completed":
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id} not finished after {timeout_s}s")
            time.sleep(poll_s)

    def iter_results(self, batch_id: str) -> Iterator[dict[str, Any]]:
        """The batch's result lines in input order, streamed."""
        with self._client.stream("GET", f"/v1/batches/{batch_id}/results") as resp:
            if resp.status_code >= 400:
                resp.read()
                raise ApiError(resp.status_code, resp.text[:300])
            for line in resp.iter_lines():
                if line.strip():
                    yield json.loads(line)

"""``AsyncParleyClient``: the gateway's REST API from asyncio code."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ValidationError

from parley_client.errors import ParleyError, error_from
from parley_wire import models as wire
from parley_wire.http import HttpClientHolder, RetryPolicy, Unreachable, send_with_retries

Config = Mapping[str, Any] | BaseModel | None
Items = Sequence[Mapping[str, Any] | BaseModel] | Path
RETRIED = (429, 503)
MAX_WAIT_S = 60.0

if TYPE_CHECKING:
    from parley_client.settings import ClientSettings


def _config(config: Config) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, BaseModel):
        return config.model_dump(mode="json", exclude_defaults=True)
    return dict(config)


def _item(item: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude_none=True) if isinstance(item, BaseModel) else dict(item)


def read_items(path: Path) -> list[dict[str, Any]]:
    """The items of a JSONL file (blank lines skipped); a line that is not a JSON object is an error
    naming its line number, raised before anything is sent."""
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}:{n}: a line must be a JSON object {{question, id?, answers?}}")
        items.append(value)
    return items


def settings_args(settings: ClientSettings | None, url: str | None) -> tuple[str, dict[str, Any]]:
    """The base URL and keyword arguments of a client for ``settings`` (read from ``PARLEY_API_*`` when
    None), so both clients' ``from_settings`` build the same connection."""
    if settings is None:
        # pydantic-settings is optional for the client: loaded only when the environment is read
        from parley_client.settings import ClientSettings

        settings = ClientSettings()
    key = settings.key.get_secret_value() if settings.key else None
    return url or settings.url, {"api_key": key, "timeout_s": settings.client_timeout_s}


class AsyncParleyClient(HttpClientHolder):
    """Submit debates and batches, follow them and read their results.

    Pass ``transport`` (or a whole ``client``) to control the network. A 429 or 503 answer is
    retried after its ``Retry-After`` (at most ``MAX_WAIT_S`` at a time, at most ``max_waits``
    times per request, 1 s when the header is missing); ``on_retry`` sees each wait. ``sleep`` is
    the waiting function (tests pass one that records).
    """

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
        on_retry: Callable[[int, float], None] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(
            client, base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )
        if client is not None and api_key:
            self._client.headers.update(headers)
        # A 429/503 is waited out after its Retry-After (1 s without one, at most MAX_WAIT_S at a
        # time), up to ``max_waits`` times per request.
        self._policy = RetryPolicy(
            max_attempts=max_waits + 1,
            retry_after_cap_s=MAX_WAIT_S,
            over_cap="clamp",
            fixed_delay_s=1.0,
            window_s=float("inf"),
        )
        self._sleep = sleep
        self._on_retry = on_retry
        self.retries = 0

    @classmethod
    def from_settings(
        cls, settings: ClientSettings | None = None, url: str | None = None
    ) -> AsyncParleyClient:
        """A client for ``PARLEY_API_URL`` with ``PARLEY_API_KEY`` (or the settings given)."""
        base_url, kwargs = settings_args(settings, url)
        return cls(base_url, **kwargs)

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    # -- transport -------------------------------------------------------------------------------

    def _retried(self, resp: httpx.Response | None, wait: float) -> None:
        self.retries += 1
        if self._on_retry is not None and resp is not None:
            self._on_retry(resp.status_code, wait)

    async def _send(
        self, send: Callable[[], Awaitable[httpx.Response]], method: str, path: str
    ) -> httpx.Response:
        """The answer of ``send`` after the 429/503 waits (the shared retry loop); an error answer
        raises its typed ``ParleyError``. Transport errors are not retried: the caller sees them."""
        try:
            sent = await send_with_retries(
                send,
                policy=self._policy,
                retryable=lambda r: r.status_code in RETRIED,
                retry_transport_errors=False,
                sleep=self._sleep,
                on_retry=self._retried,
            )
        except Unreachable as exc:
            raise ParleyError(
                None, f"cannot reach the Parley API ({type(exc.error).__name__})"
            ) from exc.error
        resp = sent.response
        if resp.status_code >= 400:
            await resp.aread()
            await resp.aclose()
            raise error_from(resp, method, path)
        return resp

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self._send(lambda: self._client.request(method, path, **kwargs), method, path)

    async def _lines(self, path: str, headers: dict[str, str] | None = None) -> AsyncIterator[str]:
        """The lines of a streamed response, with the same retries as ``_request`` before it starts."""

        def send() -> Awaitable[httpx.Response]:
            request = self._client.build_request("GET", path, headers=headers, timeout=None)
            return self._client.send(request, stream=True)

        resp = await self._send(send, "GET", path)
        try:
            async for line in resp.aiter_lines():
                yield line
        except httpx.TransportError as exc:
            raise ParleyError(None, f"cannot reach the Parley API ({type(exc).__name__})") from exc
        finally:
            await resp.aclose()

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._request(method, path, **kwargs)).json()

    # -- single debates --------------------------------------------------------------------------

    async def submit(
        self,
        question: str,
        config: Config = None,
        *,
        answers: list[str] | None = None,
        pool: list[dict[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> wire.Accepted:
        """Queue one debate (``POST /v1/debates``); ``config`` is a ``DebateConfig`` or its fields."""
        body: dict[str, Any] = {"question": question, "config": _config(config)}
        if answers is not None:
            body["answers"] = answers
        if pool is not None:
            body["pool"] = pool
        data = await self._json("POST", "/v1/debates", json=body, headers=_idempotency(idempotency_key))
        return wire.Accepted.model_validate(data)

    async def get(self, job_id: str) -> wire.JobView:
        """The job's status, progress and (once completed) its result with the transcript."""
        return wire.JobView.model_validate(await self._json("GET", f"/v1/debates/{job_id}"))

    async def cancel(self, job_id: str) -> wire.JobView:
        """Cancel a queued or running debate; a finished one is a ``ParleyError`` with status 409."""
        return wire.JobView.model_validate(await self._json("POST", f"/v1/debates/{job_id}/cancel"))

    async def delete(self, job_id: str) -> wire.DebateDeleted:
        """Delete a debate for good (cancelled first if still running; a later ``get`` is a
        ``ParleyNotFound``); the tokens it used stay charged. An item of a batch is a ``ParleyError``
        with status 409: delete its batch."""
        return wire.DebateDeleted.model_validate(await self._json("DELETE", f"/v1/debates/{job_id}"))

    async def events(
        self, job_id: str, *, last_event_id: str | None = None
    ) -> AsyncIterator[wire.DebateEvent]:
        """The job's Server-Sent Events until it ends; ``last_event_id`` resumes after that event."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else None
        current: dict[str, str] = {}
        async for line in self._lines(f"/v1/debates/{job_id}/events", headers):
            if line.startswith(":"):
                continue
            if line:
                field, _, value = line.partition(":")
                current[field] = value.removeprefix(" ")
                continue
            if "event" in current:
                event = wire.DebateEvent(
                    id=current.get("id", ""),
                    type=current["event"],
                    data=json.loads(current.get("data") or "{}"),
                )
                yield event
                if event.type in wire.TERMINAL_EVENTS:
                    return
            current = {}

    async def wait(self, job_id: str, *, poll_s: float = 1.0, timeout_s: float | None = None) -> wire.JobView:
        """Poll until the job has finished (completed, failed or cancelled); ``TimeoutError`` after
        ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = await self.get(job_id)
            if job.status in wire.TERMINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"debate {job_id} still {job.status} after {timeout_s}s")
            await self._sleep(poll_s)

    async def ask(
        self, question: str, config: Config = None, *, timeout_s: float | None = None
    ) -> wire.JobView:
        """Submit one debate and wait for it: the finished job."""
        accepted = await self.submit(question, config)
        return await self.wait(accepted.job_id, timeout_s=timeout_s)

    async def usage(self, days: int = 7) -> wire.UsageView:
        """This key's token use per day, today's quota and the deployment's budget limits."""
        return wire.UsageView.model_validate(await self._json("GET", "/v1/usage", params={"days": days}))

    # -- batches ---------------------------------------------------------------------------------

    async def submit_batch(
        self, items: Items, config: Config = None, *, idempotency_key: str | None = None
    ) -> wire.BatchAccepted:
        """Queue one batch: a JSONL file is uploaded as it is, a list is sent as JSON items
        (``{question, id?, answers?, pool?}`` dicts or ``BatchItem``s)."""
        headers = _idempotency(idempotency_key)
        if isinstance(items, Path):
            content = await asyncio.to_thread(items.read_bytes)
            files = {"file": (items.name, content, "application/x-ndjson")}
            data = {"config": json.dumps(_config(config))}
            out = await self._json("POST", "/v1/batches", files=files, data=data, headers=headers)
        else:
            body = {"items": [_item(i) for i in items], "config": _config(config)}
            out = await self._json("POST", "/v1/batches", json=body, headers=headers)
        return wire.BatchAccepted.model_validate(out)

    async def get_batch(self, batch_id: str) -> wire.BatchView:
        return wire.BatchView.model_validate(await self._json("GET", f"/v1/batches/{batch_id}"))

    async def cancel_batch(self, batch_id: str) -> wire.BatchView:
        return wire.BatchView.model_validate(await self._json("POST", f"/v1/batches/{batch_id}/cancel"))

    async def delete_batch(self, batch_id: str) -> wire.BatchDeleted:
        """Delete a batch and its items for good (unfinished items cancelled first)."""
        return wire.BatchDeleted.model_validate(await self._json("DELETE", f"/v1/batches/{batch_id}"))

    async def wait_batch(
        self,
        batch_id: str,
        *,
        poll_s: float = 1.0,
        on_progress: Callable[[wire.BatchView], None] | None = None,
        timeout_s: float | None = None,
    ) -> wire.BatchView:
        """Poll until every item finished; ``on_progress`` sees each status. ``TimeoutError`` after
        ``timeout_s``."""
        return (
            await self.wait_batches([batch_id], poll_s=poll_s, on_progress=on_progress, timeout_s=timeout_s)
        )[0]

    async def wait_batches(
        self,
        batch_ids: Sequence[str],
        *,
        poll_s: float = 1.0,
        on_progress: Callable[[wire.BatchView], None] | None = None,
        progress: bool = False,
        timeout_s: float | None = None,
    ) -> list[wire.BatchView]:
        """Poll several batches until all finished, with a progress bar over their items if asked."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        bar = _bar(progress)
        views: dict[str, wire.BatchView] = {}
        try:
            while True:
                for batch_id in batch_ids:
                    if batch_id not in views or views[batch_id].status != "completed":
                        views[batch_id] = await self.get_batch(batch_id)
                        if on_progress is not None:
                            on_progress(views[batch_id])
                if bar is not None:
                    bar.total = sum(v.total for v in views.values())
                    bar.n = sum(wire.finished_count(v) for v in views.values())
                    bar.refresh()
                if all(v.status == "completed" for v in views.values()):
                    return [views[b] for b in batch_ids]
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"batches {', '.join(batch_ids)} not finished after {timeout_s}s")
                await self._sleep(poll_s)
        finally:
            if bar is not None:
                bar.close()

    async def iter_results(self, batch_id: str) -> AsyncIterator[wire.BatchResult]:
        """The batch's result lines in input order, streamed; an unreadable line is yielded as a
        failed entry, never dropped."""
        n = 0
        async for raw in self._lines(f"/v1/batches/{batch_id}/results"):
            n += 1
            if not raw.strip():
                continue
            try:
                yield wire.BatchResult.model_validate_json(raw)
            except ValidationError:
                yield wire.BatchResult(status="failed", error=f"unreadable results line {n}")

    async def results(self, batch_id: str) -> list[wire.BatchResult]:
        return [line async for line in self.iter_results(batch_id)]

    async def run_batch(
        self,
        items: Items,
        config: Config = None,
        *,
        chunk_size: int | None = None,
        progress: bool = True,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
    ) -> AsyncIterator[wire.BatchResult]:
        """Submit ``items`` (a JSONL file or a list) as batches of at most ``chunk_size`` items,
        wait for them with a progress bar, and yield every result in input order."""
        rows: list[Any] = read_items(items) if isinstance(items, Path) else list(items)
        size = chunk_size or max(1, len(rows))
        accepted = [
            await self.submit_batch(rows[i : i + size], config) for i in range(0, max(1, len(rows)), size)
        ]
        ids = [a.batch_id for a in accepted]
        await self.wait_batches(ids, poll_s=poll_s, progress=progress, timeout_s=timeout_s)
        for batch_id in ids:
            async for line in self.iter_results(batch_id):
                yield line


def _idempotency(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key else {}


def _bar(show: bool) -> Any:
    if not show:
        return None
    from tqdm.auto import tqdm  # not among the client's own requirements: loaded only for a progress bar

    return tqdm(total=0, unit="item", desc="debates")

"""One attempt of a chat-completion call: its request running in a task of its own (so the caller's
deadline can end the wait without cutting it), the per-endpoint limit on requests in flight, and what
an unsuccessful reply is worth (retried, or raised at once). ``client`` runs the retry loop over these.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from services.chat_model import (
    LLMBadRequest,
    LLMError,
    LLMRateLimited,
    LLMSchemaRejected,
    LLMServerError,
    context_refusal,
)

RETRYABLE_STATUS = frozenset({408, 409, 429})


def retryable_failure(
    resp: httpx.Response, url: str, asked_schema: bool, retry_after: float | None
) -> LLMError:
    """The error an unsuccessful reply is worth retrying as; raises the ones retrying cannot help."""
    status = resp.status_code
    text = resp.text[:500]
    if status in (400, 500) and (refusal := context_refusal(url, text)) is not None:
        raise refusal
    if asked_schema and "response_format" in resp.text:
        # Some servers (llama-cpp-python) answer an unsupported response_format with a 500 naming it;
        # retrying cannot help, falling back to text can.
        raise LLMSchemaRejected(f"HTTP {status}: {text}", url=url, status=status, body=text)
    if status == 429:
        return LLMRateLimited(f"rate limited (429): {text}", url=url, retry_after=retry_after)
    if status in RETRYABLE_STATUS or status >= 500:
        return LLMServerError(f"HTTP {status}: {text}", url=url, status=status)
    raise LLMBadRequest(f"HTTP {status}: {text}", url=url, status=status, body=text)


def server_fault(resp: httpx.Response) -> bool:
    """A reply that says the server (not the request) is broken: it takes a replica out. A 429 is an
    answer (the server is up, only busy), and so is a 5xx that refuses this prompt or its schema."""
    status = resp.status_code
    if status < 500 and status != 408:
        return False
    text = resp.text[:2000]
    return context_refusal("", text) is None and "response_format" not in text


class EndpointLimits:
    """Process-wide semaphores per endpoint, rebuilt per event loop (asyncio primitives bind to one)."""

    def __init__(self) -> None:
        self._sems: dict[tuple[str, int], asyncio.Semaphore] = {}

    def get(self, endpoint: str, limit: int) -> asyncio.Semaphore:
        loop_id = id(asyncio.get_running_loop())
        key = (endpoint, loop_id)
        sem = self._sems.get(key)
        if sem is None:
            # Drop semaphores of loops that are gone so long-lived workers do not accumulate them.
            self._sems = {k: v for k, v in self._sems.items() if k[0] != endpoint}
            sem = self._sems[key] = asyncio.Semaphore(limit)
        return sem


ENDPOINT_LIMITS = EndpointLimits()


class Overdue(Exception):
    """The deadline passed while the request was still running (it is not cut by this)."""


class InFlightRequest:
    """One attempt's HTTP request, in a task of its own so that the caller's deadline can end the wait
    without cutting it. It holds ``limit`` (acquired by the caller) until the request itself ends,
    however that is: answered, failed, cut."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout: httpx.Timeout,
        limit: asyncio.Semaphore,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._sent = loop.create_future()

        async def trace(event: str, info: dict[str, Any]) -> None:
            # httpcore names the step after the request was written "…receive_response_headers":
            # from there on the server has the request, and the deadline runs (as a read timeout
            # would); connecting, waiting for a pooled connection and writing keep httpx's timeouts.
            if event.endswith("receive_response_headers.started") and not self._sent.done():
                self._sent.set_result(loop.time())

        self.task: asyncio.Task[httpx.Response] = asyncio.ensure_future(
            client.post(url, json=body, headers=headers, timeout=timeout, extensions={"trace": trace})
        )
        self.task.add_done_callback(lambda _: limit.release())
        self.task.add_done_callback(drop_unread_error)  # its error is read by whoever awaits it, or dropped

    async def reply(self, deadline_s: float) -> httpx.Response:
        """The response, or ``Overdue`` once ``deadline_s`` have passed since the request was sent (it
        keeps running). A caller cancelled meanwhile cuts the request, as it always did."""
        try:
            await asyncio.wait({self.task, self._sent}, return_when=asyncio.FIRST_COMPLETED)
            if not self.task.done():
                left = deadline_s - (asyncio.get_running_loop().time() - self._sent.result())
                await asyncio.wait({self.task}, timeout=max(0.0, left))
        except asyncio.CancelledError:
            self.task.cancel()
            raise
        finally:
            if not self._sent.done():
                self._sent.cancel()
        if not self.task.done():
            raise Overdue
        return self.task.result()

    async def cut(self) -> None:
        """End the request now (the server sees the connection close) and wait until it has ended."""
        self.task.cancel()
        await asyncio.wait({self.task})


def drop_unread_error(future: asyncio.Future[Any]) -> None:
    # A request or late reply nobody awaits (cut by its caller; a caller that does not settle usage)
    # must not log its error as "never retrieved": its outcome is the caller's to use or to drop.
    if not future.cancelled():
        future.exception()

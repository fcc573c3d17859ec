"""The one retry loop of Parley's HTTP clients (the LLM client, the retriever client, the gateway client).

Each client builds its request and maps the final answer to its own typed errors; what they share is
here: who closes the ``httpx.AsyncClient`` (``HttpClientHolder``), when to try again (``RetryPolicy``:
attempts, a time window, full-jitter backoff, ``Retry-After`` honoured up to a cap), the
``Retry-After`` parser, and reading an RFC 9457 problem document so errors are told apart by the
problem's ``type``, never by its human-readable title. Retries live in this one layer; a client that
wraps another never retries again.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import httpx


class HttpClientHolder:
    """The ``httpx.AsyncClient`` of one of Parley's HTTP clients: the caller's when one is passed (a
    test's, or one shared between clients; its caller closes it), else one made here with
    ``options``, which ``aclose`` (or leaving ``async with``) closes."""

    def __init__(self, client: httpx.AsyncClient | None, **options: Any) -> None:
        self._owns_client = client is None
        self._client = httpx.AsyncClient(**options) if client is None else client

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass(frozen=True)
class RetryPolicy:
    """Transient failures are retried until ``max_attempts`` or the ``window_s`` of time since the first
    attempt runs out, whichever comes first: an outage shorter than the window delays the call, a
    longer one fails it with the last error.

    A ``Retry-After`` wins over the backoff. One beyond ``retry_after_cap_s`` either ends the retries
    (``over_cap="give_up"``: a debate is not stalled for minutes) or is waited as the cap
    (``"clamp"``: a batch client would rather wait). ``fixed_delay_s`` replaces the jittered backoff
    when the server gave no hint (the gateway client waits 1 s).
    """

    max_attempts: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    retry_after_cap_s: float = 60.0
    window_s: float = 300.0
    over_cap: Literal["give_up", "clamp"] = "give_up"
    fixed_delay_s: float | None = None

    def gives_up(self, attempt: int, elapsed_s: float, delay_s: float) -> bool:
        return attempt >= self.max_attempts or elapsed_s + delay_s > self.window_s

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Delay before retry number ``attempt`` (1-based): full jitter, unless the server said when."""
        if retry_after is not None:
            return min(retry_after, self.retry_after_cap_s)
        if self.fixed_delay_s is not None:
            return self.fixed_delay_s
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2 ** (attempt - 1)))
        return random.uniform(0, ceiling)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header, which may be delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class ProblemDoc:
    """An error answer read as RFC 9457 (``type`` ``about:blank`` when the body is not a problem)."""

    status: int
    type: str = "about:blank"
    title: str = ""
    detail: str = ""
    body: dict[str, Any] = field(default_factory=dict)


def read_problem(resp: httpx.Response, limit: int = 500) -> ProblemDoc:
    """The problem document of an error response (its body must have been read); a body that is not
    JSON becomes the ``detail``, cut to ``limit`` characters."""
    try:
        body = resp.json()
    except ValueError:
        return ProblemDoc(resp.status_code, detail=resp.text[:limit])
    if not isinstance(body, dict):
        return ProblemDoc(resp.status_code, detail=str(body)[:limit])
    return ProblemDoc(
        status=resp.status_code,
        type=str(body.get("type") or "about:blank"),
        title=str(body.get("title") or ""),
        detail=str(body.get("detail", body))[:limit],
        body=body,
    )


class Unreachable(Exception):
    """Every attempt failed without an answer (connection refused, reset, timeouts)."""

    def __init__(self, error: httpx.TransportError, attempts: int, elapsed_s: float) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        self.attempts = attempts
        self.elapsed_s = elapsed_s


@dataclass(frozen=True)
class Sent:
    """The last answer of a request (a success, or the last retryable failure), and what it took."""

    response: httpx.Response
    attempts: int
    elapsed_s: float
    retry_after: float | None


async def send_with_retries(
    send: Callable[[], Awaitable[httpx.Response]],
    *,
    policy: RetryPolicy,
    retryable: Callable[[httpx.Response], bool],
    retry_transport_errors: bool = True,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_retry: Callable[[httpx.Response | None, float], None] | None = None,
) -> Sent:
    """Call ``send`` until its answer is not ``retryable`` or the policy gives up.

    ``retryable`` sees every answer; it may raise the caller's typed error for an answer that no retry
    can help (an index that is not built, a prompt over the context). A transport error is retried
    when ``retry_transport_errors``, and raised as ``Unreachable`` once the policy gives up; any other
    exception from ``send`` (a read timeout a client chose not to retry) passes through untouched. A
    discarded answer is closed, so ``send`` may open streamed responses.
    """
    first = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        retry_after: float | None = None
        resp: httpx.Response | None = None
        try:
            resp = await send()
        except httpx.TransportError as exc:
            if not retry_transport_errors:
                raise Unreachable(exc, attempt, time.monotonic() - first) from exc
            error: httpx.TransportError | None = exc
        else:
            error = None
            if not retryable(resp):
                return Sent(resp, attempt, time.monotonic() - first, None)
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
        over_cap = retry_after is not None and retry_after > policy.retry_after_cap_s
        delay = policy.backoff(attempt, retry_after)
        if (over_cap and policy.over_cap == "give_up") or policy.gives_up(
            attempt, time.monotonic() - first, delay
        ):
            if resp is None:
                assert error is not None
                raise Unreachable(error, attempt, time.monotonic() - first) from error
            return Sent(resp, attempt, time.monotonic() - first, retry_after)
        if resp is not None:
            await resp.aclose()
        if on_retry is not None:
            on_retry(resp, delay)
        await sleep(delay)

"""The chat-model port: what the engine and every other caller depend on to talk to a model, and nothing
that opens a socket. The ``ChatModel`` protocol every backend implements (the HTTP client in
``services.llm.client``, the replica sets behind it, the tests' scripted models), the messages and the
completion it returns, and the typed errors a call can end with. The engine imports this module, never
the client: a backend can change without the engine knowing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypedDict

import httpx

from services.errors import ParleyError

# The name an operator gives an LLM endpoint (PARLEY_LLM_ENDPOINTS), which a client's team names.
ENDPOINT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

__all__ = [
    "ENDPOINT_NAME",
    "ChatCompletion",
    "ChatMessage",
    "ChatModel",
    "LLMBadRequest",
    "LLMContextExceeded",
    "LLMEgressRefused",
    "LLMError",
    "LLMProtocolError",
    "LLMRateLimited",
    "LLMSchemaRejected",
    "LLMServerError",
    "LLMTimeout",
    "LLMUnavailable",
    "LateReply",
    "StructuredMode",
    "context_refusal",
    "redact_url",
]

# "json_schema": OpenAI form; "json_object": llama-cpp-python's form; "off": never send a schema.
StructuredMode = Literal["json_schema", "json_object", "off"]


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class ChatCompletion:
    """One completed call: the text plus the accounting the transcript needs."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    attempts: int = 1
    finish_reason: str | None = None
    cached_tokens: int | None = None
    # None: no schema asked for; "schema": sent with response_format; "text": the endpoint refused
    # response_format, so the caller must parse text.
    output_mode: Literal["schema", "text"] | None = None
    # Earlier attempts of this call that timed out on another replica and are still running in their
    # grace: each resolves to what that server served (see ``LateReply``); the usage above is only
    # the answering attempt's.
    late_attempts: tuple[LateReply, ...] = field(default=(), compare=False, repr=False)
    # Replayed from the call cache (``services.call_cache``): no model was called and nothing is charged.
    from_cache: bool = False


# What a request that outlived the client's deadline turned out to cost: its ``ChatCompletion`` (with
# the usage the server reported) when the server answered within the grace; ``LLMTimeout`` when the
# grace ran out or the request was cut (the server may have served it: unknown); another ``LLMError``
# when the server answered with an error (nothing served). Cancelling it cuts the request.
LateReply: TypeAlias = "asyncio.Future[ChatCompletion]"


class LLMError(ParleyError):
    """Base of all LLM client errors; carries the endpoint URL so messages say where it failed.

    ``reason`` is the message without the URL: what a client of the API may be shown (an internal
    address is the operator's business). The URL itself is kept without credentials or query.
    """

    # Attempts of the call that timed out on a replica before it failed over, still running in their
    # grace (``ChatCompletion.late_attempts``): the server may serve them although the call failed.
    late_attempts: tuple[LateReply, ...] = ()

    def __init__(self, message: str, *, url: str) -> None:
        safe = redact_url(url)
        super().__init__(f"{message} ({safe})")
        self.url = safe
        self.reason = message


def redact_url(url: str) -> str:
    """``url`` without user info, query or fragment, so no credential embedded in it is ever shown."""
    try:
        parts = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<invalid URL>"
    host = parts.host or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else "<invalid URL>"


class LLMUnavailable(LLMError):
    """The server could not be reached (connection refused, DNS, reset) after all attempts."""


class LLMTimeout(LLMError):
    """The server accepted the request but did not answer within the client's deadline.

    ``late``: the request, left running for the client's grace, as a ``LateReply`` (None when it was
    cut at the deadline: a grace of 0, or a transport that does not say when a request was sent)."""

    def __init__(self, message: str, *, url: str, late: LateReply | None = None) -> None:
        super().__init__(message, url=url)
        self.late = late


class LLMRateLimited(LLMError):
    """429 after all attempts; ``retry_after`` is the server's last hint in seconds, if any."""

    def __init__(self, message: str, *, url: str, retry_after: float | None) -> None:
        super().__init__(message, url=url)
        self.retry_after = retry_after


class LLMServerError(LLMError):
    """A retryable HTTP status (408, 409, 5xx) that persisted through all attempts."""

    def __init__(self, message: str, *, url: str, status: int) -> None:
        super().__init__(message, url=url)
        self.status = status


class LLMBadRequest(LLMError):
    """A non-retryable 4xx: the request itself is wrong (bad model name, bad key, bad parameters)."""

    def __init__(self, message: str, *, url: str, status: int, body: str) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.body = body


class LLMSchemaRejected(LLMBadRequest):
    """The server refused ``response_format`` (any status whose body names it)."""


class LLMContextExceeded(LLMBadRequest):
    """The prompt (plus room for the reply) does not fit the server's context window."""

    def __init__(self, *, url: str, prompt_tokens: int | None, context: int | None, reply_tokens: int = 0):
        sizes = f"{prompt_tokens} prompt tokens" if prompt_tokens is not None else "the prompt"
        room = f" + {reply_tokens} for the reply" if reply_tokens else ""
        window = f"the context of {context} tokens" if context is not None else "the server's context"
        message = f"{sizes}{room} do not fit {window}; shorten the question, the pool or the rounds"
        super().__init__(message, url=url, status=400, body=message)
        self.prompt_tokens = prompt_tokens
        self.context = context


_CONTEXT_REFUSAL = re.compile(r"exceed_context_size|exceeds? the (available )?context|context window", re.I)


def context_refusal(url: str, text: str) -> LLMContextExceeded | None:
    """llama-server's (and llama-cpp-python's) refusal of a prompt longer than the context, typed."""
    if not _CONTEXT_REFUSAL.search(text):
        return None
    prompt = re.search(r'"n_prompt_tokens"\s*:\s*(\d+)|Requested tokens \((\d+)\)', text)
    ctx = re.search(r'"n_ctx"\s*:\s*(\d+)|context window of (\d+)', text)
    return LLMContextExceeded(
        url=url,
        prompt_tokens=int(next(g for g in prompt.groups() if g)) if prompt else None,
        context=int(next(g for g in ctx.groups() if g)) if ctx else None,
    )


class LLMEgressRefused(LLMError):
    """A client-chosen URL leads to an address clients may not reach (``services.egress``); nothing
    was sent. Its reason is Parley's own words and names only the host the client gave."""


class LLMProtocolError(LLMError):
    """The server answered 200 with a body that is not a chat completion."""


class CompletionOptions(TypedDict, total=False):
    """``ChatModel.complete``'s keyword arguments, as a model that wraps another passes them on."""

    temperature: float
    max_tokens: int | None
    json_schema: dict[str, Any] | None
    seed: int | None
    cache_key: str | None


class ChatModel(Protocol):
    """What the engine needs from a model: one chat completion at a time."""

    @property
    def model(self) -> str: ...

    @property
    def endpoint(self) -> str: ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float = 0.5,
        max_tokens: int | None = None,
        json_schema: dict[str, Any] | None = None,
        seed: int | None = None,
        cache_key: str | None = None,
    ) -> ChatCompletion: ...

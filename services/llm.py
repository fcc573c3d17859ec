"""Async client for OpenAI-compatible ``/v1/chat/completions`` endpoints.

Every model Parley talks to (the embedded llama.cpp server, vLLM, Ollama, TGI, OpenAI, LiteLLM) is
reached through this one client. Retries are the shared loop of ``services.http_client`` and nowhere
else: connection errors, 408, 409, 429 and 5xx are retried with exponential backoff and full jitter
(``Retry-After`` wins when the server sends it); other 4xx fail at once. A per-server semaphore
bounds in-flight requests so that a batch cannot flood a server that serves one request at a time.

An endpoint may be several servers of one model (``services.replicas``): every attempt of the retry
loop asks the replica set where to go, so a call that fails on one replica is retried on another, and
the usage of a call is what the replica that answered it reported, exactly as with one URL.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict

import httpx

from services.egress import EgressRefused
from services.errors import ParleyError

# RetryPolicy is the shared retry layer's; LLM callers import it from here.
from services.http_client import RetryPolicy as RetryPolicy
from services.http_client import Unreachable, parse_retry_after, send_with_retries
from services.replicas import REPLICA_HEALTH, ReplicaRegistry, ReplicaSet, affinity_key

RETRYABLE_STATUS = frozenset({408, 409, 429})

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


class LLMError(ParleyError):
    """Base of all LLM client errors; carries the endpoint URL so messages say where it failed.

    ``reason`` is the message without the URL: what a client of the API may be shown (an internal
    address is the operator's business). The URL itself is kept without credentials or query.
    """

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
    """The server accepted the request but did not answer within the read timeout."""


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


def _server_fault(resp: httpx.Response) -> bool:
    """A reply that says the server (not the request) is broken: it takes a replica out. A 429 is an
    answer (the server is up, only busy), and so is a 5xx that refuses this prompt or its schema."""
    status = resp.status_code
    if status < 500 and status != 408:
        return False
    text = resp.text[:2000]
    return context_refusal("", text) is None and "response_format" not in text


class _EndpointLimits:
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


ENDPOINT_LIMITS = _EndpointLimits()


class _SlotAffinity:
    """Which server slot each cache key uses, per endpoint and process: keys take slots in the order
    they first appear, so one debate's selection, agents and panel each keep a slot of their own
    (with at least as many slots as keys) and their next prompt starts from their cached prefix."""

    def __init__(self) -> None:
        self._by_endpoint: dict[str, dict[str, int]] = {}

    def slot(self, endpoint: str, key: str, slots: int) -> int:
        keys = self._by_endpoint.setdefault(endpoint, {})
        if key not in keys:
            keys[key] = len(keys) % slots
        return keys[key]


SLOT_AFFINITY = _SlotAffinity()


class OpenAIChatClient:
    """A ``ChatModel`` over HTTP. Pass ``client`` (or ``transport``) to control the network in tests."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 4,
        max_tokens: int = 512,
        structured_mode: StructuredMode = "json_schema",
        slots: int | None = None,
        context_tokens: int | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        replica_name: str = "default",
        replica_cooldown_s: float = 5.0,
        replica_cooldown_max_s: float = 120.0,
        replica_spill_gap: int | None = 2,
        replica_registry: ReplicaRegistry = REPLICA_HEALTH,
    ) -> None:
        # Several URLs: replicas of one model, chosen per attempt (``services.replicas``). A string
        # is one URL, never split here: only the operator's settings list replicas.
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self._replicas = ReplicaSet(
            urls,
            name=replica_name,
            limit=max_concurrency,
            cooldown_s=replica_cooldown_s,
            cooldown_max_s=replica_cooldown_max_s,
            spill_gap=replica_spill_gap,
            registry=replica_registry,
        )
        self._base_url = self._replicas.urls[0]
        self._model = model
        self._api_key = api_key
        self._retry = retry or RetryPolicy()
        self._max_concurrency = max_concurrency
        self._max_tokens = max_tokens
        self._structured_mode: StructuredMode = structured_mode
        # A llama.cpp server with this many KV-cache slots: calls that share a cache_key go to one
        # slot, so a prefix a role will send again stays cached there (see SLOT_AFFINITY).
        self._slots = slots
        # A llama.cpp server's context per request: prompts that cannot fit are refused before the
        # call (counted with the server's own tokenizer), not after a long prompt evaluation.
        self._context_tokens = context_tokens
        self._sleep = sleep
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout, transport=transport)
        self._timeout = timeout
        # Learned once per endpoint: does it accept response_format with a schema?
        self._schema_supported: bool | None = None if structured_mode != "off" else False

    @property
    def model(self) -> str:
        return self._model

    @property
    def endpoint(self) -> str:
        return ",".join(self._replicas.urls)

    @property
    def replicas(self) -> ReplicaSet:
        """The servers this endpoint spreads its calls over (one for a single URL)."""
        return self._replicas

    @property
    def max_tokens(self) -> int:
        """The reply length sent when a call names none (what a token budget must reserve)."""
        return self._max_tokens

    @property
    def schema_supported(self) -> bool | None:
        return self._schema_supported

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _check_fits(self, messages: Sequence[ChatMessage], max_tokens: int) -> None:
        """Count the prompt with the server's ``/tokenize`` and refuse it when it cannot fit; a server
        without that endpoint is not checked here (it refuses such a prompt itself)."""
        root = self._base_url.removesuffix("/v1")
        text = "\n".join(m["content"] for m in messages)
        try:
            resp = await self._client.post(f"{root}/tokenize", json={"content": text}, timeout=self._timeout)
            tokens = len(resp.json()["tokens"]) if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            tokens = None
        if tokens is None or self._context_tokens is None:
            return
        framing = 8 * len(messages)  # the chat template's role markers around each message
        if tokens + framing + max_tokens > self._context_tokens:
            raise LLMContextExceeded(
                url=f"{self._base_url}/chat/completions",
                prompt_tokens=tokens + framing,
                context=self._context_tokens,
                reply_tokens=max_tokens,
            )

    def _response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self._structured_mode == "json_object":
            # llama-cpp-python's server turns a schema under json_object into a grammar.
            return {"type": "json_object", "schema": schema}
        # vLLM, OpenAI, LiteLLM and llama.cpp's own llama-server take the OpenAI form.
        return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float = 0.5,
        max_tokens: int | None = None,
        json_schema: dict[str, Any] | None = None,
        seed: int | None = None,
        cache_key: str | None = None,
    ) -> ChatCompletion:
        """One chat completion with bounded retries; raises a typed ``LLMError`` when it cannot.

        ``cache_key`` names the prompt family a call belongs to (an agent, the selection, the panel):
        on an endpoint with ``slots`` it picks the server slot outside a worker's job, elsewhere it is
        not sent.
        """
        body: dict[str, Any] = {
            "model": self._model,
            "messages": list(messages),
            "temperature": temperature,
            "max_tokens": max_tokens or self._max_tokens,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = seed
        if self._slots and cache_key is not None:
            body["cache_prompt"] = True
            if affinity_key() is None:
                # One process's debate (parley ask, parley eval): each prompt family keeps a slot.
                body["id_slot"] = SLOT_AFFINITY.slot(self._base_url, cache_key, self._slots)
            # A worker's job: the worker's processes share the server and cannot see each other's
            # slots, so the server picks the idle slot whose cached prompt shares the longest prefix
            # with this one (llama.cpp's slot similarity), and restores evicted prompts from its
            # host-memory cache.
        output_mode: Literal["schema", "text"] | None = None
        if json_schema is not None:
            if self._schema_supported is False:
                output_mode = "text"
            else:
                body["response_format"] = self._response_format(json_schema)
                output_mode = "schema"
        if self._context_tokens is not None:
            await self._check_fits(messages, body["max_tokens"])
        try:
            return await self._post_with_retries(body, output_mode)
        except LLMBadRequest as err:
            if (
                not isinstance(err, LLMContextExceeded)
                and output_mode == "schema"
                and "response_format" in body
                and (isinstance(err, LLMSchemaRejected) or err.status in (400, 422))
            ):
                # The endpoint refuses structured output: remember it and use text from now on.
                self._schema_supported = False
                body.pop("response_format")
                return await self._post_with_retries(body, "text")
            raise

    async def _post_with_retries(
        self, body: dict[str, Any], output_mode: Literal["schema", "text"] | None
    ) -> ChatCompletion:
        url = f"{self._base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        asked_schema = "response_format" in body
        latency_ms = 0.0
        replicas = self._replicas
        key = affinity_key()
        tried: list[str] = []

        async def send() -> httpx.Response:
            nonlocal latency_ms, url
            base = replicas.pick(key, avoid=tried)
            tried.append(base)
            url = f"{base}/chat/completions"
            outcome: Literal["ok", "failed", "cancelled"] = "cancelled"
            answered_s: float | None = None
            try:
                # The server's limit is held per attempt, never while waiting to retry.
                async with ENDPOINT_LIMITS.get(base, self._max_concurrency):
                    started = time.perf_counter()
                    try:
                        resp = await self._client.post(url, json=body, headers=headers, timeout=self._timeout)
                    except httpx.ReadTimeout as exc:
                        outcome = "failed"
                        if replicas.others_usable(tried):
                            raise  # a transport error: the retry loop sends it to another replica
                        # The server is alive but slow; retrying would double its load, so fail now.
                        raise LLMTimeout(f"no reply within {self._timeout.read}s", url=url) from exc
                    except EgressRefused as exc:
                        raise LLMEgressRefused(exc.reason, url=url) from None  # no retry can change it
                    except httpx.TransportError:
                        outcome = "failed"
                        raise
                    latency_ms = (time.perf_counter() - started) * 1000
                outcome = "failed" if _server_fault(resp) else "ok"
                answered_s = latency_ms / 1000 if resp.status_code == 200 else None
                return resp
            finally:
                replicas.release(base, outcome, answered_s)

        def retryable(resp: httpx.Response) -> bool:
            if resp.status_code == 200:
                return False
            retryable_failure(resp, url, asked_schema, None)  # raises what retrying cannot help
            return True

        try:
            sent = await send_with_retries(send, policy=self._retry, retryable=retryable, sleep=self._sleep)
        except Unreachable as exc:
            raise LLMUnavailable(
                f"cannot reach LLM server: {exc.error.__class__.__name__}", url=url
            ) from None
        resp = sent.response
        if resp.status_code != 200:
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            raise retryable_failure(resp, url, asked_schema, retry_after)
        completion = self._parse(resp, url, latency_ms, sent.attempts, output_mode)
        if output_mode == "schema":
            self._schema_supported = True
        return completion

    def _parse(
        self,
        resp: httpx.Response,
        url: str,
        latency_ms: float,
        attempt: int,
        output_mode: Literal["schema", "text"] | None,
    ) -> ChatCompletion:
        try:
            data = resp.json()
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMProtocolError(f"malformed chat completion: {resp.text[:200]!r}", url=url) from exc
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens")
        if cached is None:
            # llama.cpp's llama-server reports the reused prefix in its timings.
            cached = (data.get("timings") or {}).get("cache_n")
        return ChatCompletion(
            text=text,
            model=str(data.get("model") or self._model),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_ms=latency_ms,
            attempts=attempt,
            finish_reason=choice.get("finish_reason"),
            cached_tokens=None if cached is None else int(cached),
            output_mode=output_mode,
        )

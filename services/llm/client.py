"""Async client for OpenAI-compatible ``/v1/chat/completions`` endpoints.

Every model Parley talks to (the embedded llama.cpp server, vLLM, Ollama, TGI, OpenAI, LiteLLM) is
reached through this one client. Retries are the shared loop of ``parley_wire.http`` and nowhere
else: connection errors, 408, 409, 429 and 5xx are retried with exponential backoff and full jitter
(``Retry-After`` wins when the server sends it); other 4xx fail at once. A per-server semaphore
bounds in-flight requests so that a batch cannot flood a server that serves one request at a time.

An endpoint may be several servers of one model (``services.llm.replicas``): every attempt of the retry
loop asks the replica set where to go, so a call that fails on one replica is retried on another, and
the usage of a call is what the replica that answered it reported, exactly as with one URL.

The deadline (``timeout_s``) is the client's own: it ends the caller's wait ``timeout_s`` after the
request was sent, with ``LLMTimeout`` (or, where another replica could take the call, a retry there),
but it does not cut the request. The server may still be working on it, and what it serves is owed
all the same, so the request runs on in the background for ``timeout_grace_s`` more (holding the
server's concurrency limit: the server is still busy with it) and its outcome is handed to the caller
as an awaitable (``LLMTimeout.late``, ``late_attempts``): the usage the server reported when it answered
within the grace, else an ``LLMTimeout`` once the grace has run out and the request was cut. A grace of
0 cuts the request at the deadline. Closing the client cuts every request still running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

import httpx

from parley_wire.http import HttpClientHolder, Unreachable, parse_retry_after, send_with_retries

# RetryPolicy is the shared retry layer's; LLM callers import it from here.
from parley_wire.http import RetryPolicy as RetryPolicy

# The port (messages, completions, errors, the ChatModel protocol) lives in services.chat_model; its
# names are re-exported here for the callers that take them with the client.
from services.chat_model import ChatCompletion as ChatCompletion
from services.chat_model import ChatMessage as ChatMessage
from services.chat_model import ChatModel as ChatModel
from services.chat_model import LateReply as LateReply
from services.chat_model import LLMBadRequest as LLMBadRequest
from services.chat_model import LLMContextExceeded as LLMContextExceeded
from services.chat_model import LLMEgressRefused as LLMEgressRefused
from services.chat_model import LLMError as LLMError
from services.chat_model import LLMProtocolError as LLMProtocolError
from services.chat_model import LLMRateLimited as LLMRateLimited
from services.chat_model import LLMSchemaRejected as LLMSchemaRejected
from services.chat_model import LLMServerError as LLMServerError
from services.chat_model import LLMTimeout as LLMTimeout
from services.chat_model import LLMUnavailable as LLMUnavailable
from services.chat_model import StructuredMode as StructuredMode
from services.chat_model import context_refusal as context_refusal
from services.chat_model import redact_url as redact_url
from services.egress import EgressRefused
from services.llm.attempt import (
    ENDPOINT_LIMITS,
    InFlightRequest,
    Overdue,
    drop_unread_error,
    retryable_failure,
    server_fault,
)
from services.llm.replicas import REPLICA_HEALTH, ReplicaRegistry, ReplicaSet, affinity_key


class OpenAIChatClient(HttpClientHolder):
    """A ``ChatModel`` over HTTP. Pass ``client`` (or ``transport``) to control the network in tests."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        timeout_grace_s: float = 10.0,
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
        # Several URLs: replicas of one model, chosen per attempt (``services.llm.replicas``). A string
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
        # A llama.cpp server with this many KV-cache slots: calls with a cache_key ask it to keep and
        # reuse their prompt's state (``cache_prompt``); the server picks the slot (see complete()).
        self._slots = slots
        # A llama.cpp server's context per request: prompts that cannot fit are refused before the
        # call (counted with the server's own tokenizer), not after a long prompt evaluation.
        self._context_tokens = context_tokens
        self._sleep = sleep
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        super().__init__(client, timeout=timeout, transport=transport)
        self._timeout = timeout
        # The caller's deadline per attempt (from when the request was sent) and how long a request
        # past it keeps running. httpx's own read timeout only backs them up: deadline + grace, and a
        # second more when there is a grace, so that the grace's own timer is the one that cuts.
        self._deadline_s = timeout_s
        self._grace_s = max(0.0, timeout_grace_s)
        backstop = timeout_s + self._grace_s + (1.0 if self._grace_s else 0.0)
        self._request_timeout = httpx.Timeout(
            connect=connect_timeout_s, read=backstop, write=timeout_s, pool=timeout_s
        )
        # Requests past their deadline and the tasks reading their late replies: cut when the client
        # is closed, forgotten as they end.
        self._overdue: set[asyncio.Task[httpx.Response]] = set()
        self._late_replies: set[LateReply] = set()
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

    @property
    def late_requests(self) -> int:
        """Requests past their deadline still running in their grace."""
        return len(self._overdue)

    async def aclose(self) -> None:
        """Cut the requests still running past their deadline (their late replies end as cut: the
        usage stays unknown), then close the HTTP client if this client made it."""
        running: list[asyncio.Future[Any]] = [*self._late_replies, *self._overdue]
        for future in running:
            future.cancel()
        if running:
            await asyncio.wait(running)
        await super().aclose()

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
        on an endpoint with ``slots`` the server is asked to cache the prompt; elsewhere nothing is sent.
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
            # The server gives the request the idle slot whose cached prompt shares the longest prefix
            # with it (llama.cpp's slot similarity) and restores evicted prompts from its host-memory
            # cache. No slot is ever named (``id_slot``): llama.cpp, asked for a slot that is busy,
            # loads the cached prompt nearest the new request into that slot while the request in
            # flight there is still generating, which then goes on from another conversation's state
            # (bench/slot_isolation.py: 17 of 192 replies named another conversation's code when each
            # prompt family was pinned to a slot, none when the server chose).
            body["cache_prompt"] = True
        output_mode: Literal["schema", "text"] | None = None
        if json_schema is not None:
            if self._schema_supported is False:
                output_mode = "text"
            else:
                body["response_format"] = self._response_format(json_schema)
                output_mode = "schema"
        if self._context_tokens is not None:
            await self._check_fits(messages, body["max_tokens"])
        # Attempts that timed out on one replica before the call went to another: still running in
        # their grace, handed to the caller with whatever this call ends in.
        earlier: list[LateReply] = []
        try:
            completion = await self._send_body(body, output_mode, earlier)
        except LLMError as err:
            err.late_attempts = tuple(earlier)
            raise
        return replace(completion, late_attempts=tuple(earlier)) if earlier else completion

    async def _send_body(
        self,
        body: dict[str, Any],
        output_mode: Literal["schema", "text"] | None,
        earlier: list[LateReply],
    ) -> ChatCompletion:
        try:
            return await self._post_with_retries(body, output_mode, earlier)
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
                return await self._post_with_retries(body, "text", earlier)
            raise

    async def _post_with_retries(
        self,
        body: dict[str, Any],
        output_mode: Literal["schema", "text"] | None,
        earlier: list[LateReply],
    ) -> ChatCompletion:
        """The call's retry loop; attempts that time out and fail over to another replica leave their
        late replies in ``earlier``."""
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
                resp, latency_ms = await self._attempt(
                    base, body, headers, output_mode, earlier, lambda: replicas.others_usable(tried)
                )
                outcome = "failed" if server_fault(resp) else "ok"
                answered_s = latency_ms / 1000 if resp.status_code == 200 else None
                return resp
            except (LLMTimeout, httpx.TransportError):
                outcome = "failed"  # unreachable, or alive but slow: taken out for a while
                raise
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

    async def _attempt(
        self,
        base: str,
        body: dict[str, Any],
        headers: dict[str, str],
        output_mode: Literal["schema", "text"] | None,
        earlier: list[LateReply],
        fail_over: Callable[[], bool],
    ) -> tuple[httpx.Response, float]:
        """One attempt at one server: its response and how long it took once the server's limit was
        held. Past the deadline it raises ``LLMTimeout`` (the request left running for the grace, as
        ``late``), or, when ``fail_over()`` says another replica could take the call, a read timeout
        for the retry loop (the request's late reply goes to ``earlier``)."""
        url = f"{base}/chat/completions"
        # The server's limit is held per attempt, never while waiting to retry, and for as long as
        # the request runs: past the deadline too, while the server still works on it.
        limit = ENDPOINT_LIMITS.get(base, self._max_concurrency)
        await limit.acquire()
        started = time.perf_counter()
        request = InFlightRequest(self._client, url, body, headers, self._request_timeout, limit)
        try:
            resp = await request.reply(self._deadline_s)
        except Overdue:
            late = await self._overdue_request(request, url, output_mode, started)
            message = f"no reply within {self._deadline_s}s"
            if fail_over():
                if late is not None:
                    earlier.append(late)
                raise httpx.ReadTimeout(message) from None  # a transport error: the next replica
            # The server is alive but slow; retrying would double its load, so fail now.
            raise LLMTimeout(message, url=url, late=late) from None
        except httpx.ReadTimeout as exc:
            # httpx's own read timeout: a transport that does not say when a request was sent has
            # no deadline of its own, and is cut, as always.
            if fail_over():
                raise
            raise LLMTimeout(f"no reply within {self._deadline_s}s", url=url) from exc
        except EgressRefused as exc:
            raise LLMEgressRefused(exc.reason, url=url) from None  # no retry can change it
        return resp, (time.perf_counter() - started) * 1000

    async def _overdue_request(
        self,
        request: InFlightRequest,
        url: str,
        output_mode: Literal["schema", "text"] | None,
        started: float,
    ) -> LateReply | None:
        """A request past its deadline: left running for the grace, its outcome a ``LateReply``; cut
        at once (None) with no grace."""
        if self._grace_s <= 0:
            await request.cut()
            return None
        task = request.task
        self._overdue.add(task)
        task.add_done_callback(self._overdue.discard)
        late: LateReply = asyncio.ensure_future(self._late_reply(request, url, output_mode, started))
        self._late_replies.add(late)
        late.add_done_callback(self._late_replies.discard)
        late.add_done_callback(drop_unread_error)
        # However the late reply ends (even cancelled before it ran), the request ends with it.
        late.add_done_callback(lambda _: task.cancel())
        return late

    async def _late_reply(
        self,
        request: InFlightRequest,
        url: str,
        output_mode: Literal["schema", "text"] | None,
        started: float,
    ) -> ChatCompletion:
        """What the server made of a request past its deadline, waited for at most the grace; a request
        still running then is cut, and so is one whose reader is cancelled."""
        try:
            async with asyncio.timeout(self._grace_s):
                resp = await asyncio.shield(request.task)
        except TimeoutError:
            raise LLMTimeout(
                f"no reply within {self._deadline_s}s nor its grace of {self._grace_s}s", url=url
            ) from None
        except httpx.HTTPError as exc:
            # Cut by the server or the network after the deadline: whether it served is unknown.
            raise LLMTimeout(
                f"no reply within {self._deadline_s}s; then {type(exc).__name__}", url=url
            ) from None
        finally:
            if not request.task.done():
                await request.cut()
        latency_ms = (time.perf_counter() - started) * 1000
        if resp.status_code != 200:
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            raise retryable_failure(resp, url, output_mode == "schema", retry_after)
        return self._parse(resp, url, latency_ms, 1, output_mode)

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

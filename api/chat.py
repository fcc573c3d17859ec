"""The service behind ``POST /v1/chat/completions``: a chat request run as one debate.

The request becomes a ``DebateRequest`` and goes through the same service layer as
``POST /v1/debates`` (``api.submission``), so every surface applies the same admission rules,
limits, quotas and budgets. The job is followed through the one event reader
(``api.streams.JobEventReader``): as ``chat.completion.chunk`` dicts for a streamed answer, or by
blocking until it ends for a plain one. Errors are OpenAI error objects (``OpenAIError``) or the
service layer's typed errors, which the route turns into OpenAI's shape.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import ValidationError

from api.deps import ApiState
from api.openai_compat import (
    ChatCompletionRequest,
    OpenAIError,
    chunk,
    citations,
    completion,
    debate_config,
    find_model,
    from_validation,
    now,
    parley_object,
    progress_text,
    question_of,
    refuse_unsupported,
    usage_object,
)
from api.problems import STORE_UNAVAILABLE
from api.schemas import DebateRequest
from api.streams import JobEventReader, StreamSlot
from api.submission import admit_debate, cancel_job, owned_job, submit_debate
from engine.result import DebateResult

DISCONNECTED = "the client closed the chat completion before the answer"


@dataclass
class ChatStream:
    """A streamed answer: its chunks, the stream slot they hold, and what to run however the stream
    ends (cancel the debate if nobody is waiting for it any more)."""

    chunks: AsyncIterator[dict[str, str]]
    slot: StreamSlot
    on_end: Callable[[], Awaitable[object]]


async def chat_completion(
    state: ApiState,
    owner: str,
    raw: bytes,
    base_url: str,
    disconnected: Callable[[], Awaitable[bool]],
) -> dict[str, Any] | ChatStream | None:
    """Debate the last user message with the protocol the model names.

    Returns the ``chat.completion`` document, a ``ChatStream`` (``stream=true``), or None when the
    client left before the answer (its debate is then cancelled).
    """
    try:
        body = ChatCompletionRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise from_validation([dict(e) for e in exc.errors(include_url=False)]) from exc
    entry = find_model(body.model)
    refuse_unsupported(body)
    question = question_of(body.messages)
    config = debate_config(entry, body)
    try:
        request_body = DebateRequest(question=question, config=config)
    except ValidationError as exc:
        raise from_validation([dict(e) for e in exc.errors(include_url=False)]) from exc
    admitted = admit_debate(state, request_body, field="parley")
    # The stream slot is taken before the job is queued: a refused stream queues nothing.
    slot = await state.streams.acquire(owner)
    try:
        job = await submit_debate(state, owner, request_body, admitted)
    except BaseException:
        await state.streams.release(slot)
        raise
    created = now()
    if body.stream:
        events = CompletionEvents(state, owner, job.job_id, body.model, created, base_url, body.include_usage)
        return ChatStream(events.chunks(), slot, lambda: cancel_job(state, job.job_id, DISCONNECTED))
    try:
        ended = await wait_for_end(state, job.job_id, slot, disconnected)
    finally:
        with anyio.CancelScope(shield=True):
            await state.streams.release(slot)
    if ended is None:
        with anyio.CancelScope(shield=True):
            await cancel_job(state, job.job_id, DISCONNECTED)
        return None
    result = await finished_result(state, owner, job.job_id)
    return completion(body.model, job.job_id, result, base_url, created)


async def wait_for_end(
    state: ApiState, job_id: str, slot: StreamSlot, disconnected: Callable[[], Awaitable[bool]]
) -> str | None:
    """Block on the job's events until it ends; its terminal status, or None if the client left.
    The stream slot is renewed meanwhile, as an open event stream renews its own."""
    renew_every = state.streams.slot_ttl_s / 3
    renewed = time.monotonic()

    async def renew() -> None:
        nonlocal renewed
        if time.monotonic() - renewed > renew_every:
            await state.streams.renew(slot)
            renewed = time.monotonic()

    reader = JobEventReader(
        state.event_store,
        job_id,
        block_ms=min(state.settings.sse_block_ms, 1000),
        disconnected=disconnected,
        between=renew,
    )
    async for _ in reader.events():
        pass
    if reader.client_left:
        return None
    return reader.outcome or "failed"


async def finished_result(state: ApiState, owner: str, job_id: str) -> DebateResult:
    """The completed job's result, or the OpenAI error that says why there is none."""
    found = await owned_job(state, owner, job_id, with_result=True)
    job = found.job
    if job.status == "completed" and found.result_json:
        return DebateResult.model_validate_json(found.result_json)
    if job.status == "cancelled":
        raise OpenAIError(409, f"the debate {job_id} was cancelled", code="debate_cancelled")
    raise OpenAIError(
        502,
        f"the debate {job_id} failed: {job.error or 'no result'}",
        type_="server_error",
        code="debate_failed",
    )


log = logging.getLogger(__name__)


@dataclass
class CompletionEvents:
    """A job's event stream as ``chat.completion.chunk`` dicts for ``EventSourceResponse``."""

    state: ApiState
    owner: str
    job_id: str
    model: str
    created: int
    base_url: str
    include_usage: bool

    def _data(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, str]:
        return {"data": json.dumps(chunk(self.model, self.job_id, self.created, delta, finish))}

    async def chunks(self) -> AsyncIterator[dict[str, str]]:
        """The stream's chunks; should the job store become unreachable mid-stream, an OpenAI error
        object saying so (the debate goes on: its result is read later by the job id) and [DONE],
        instead of a response broken off."""
        try:
            async for field in self._chunks():
                yield field
        except STORE_UNAVAILABLE as exc:
            log.warning("chat stream ended: the job store is unavailable: %s: %s", type(exc).__name__, exc)
            error = OpenAIError(
                503,
                f"the job store became unavailable mid-stream; the debate {self.job_id} goes on: read "
                f"its result with GET /v1/debates/{self.job_id}",
                type_="server_error",
                code="store_unavailable",
            )
            yield {"data": json.dumps(error.body())}
            yield {"data": "[DONE]"}

    async def _chunks(self) -> AsyncIterator[dict[str, str]]:
        """Role, then progress as reasoning, then the answer, the stop, usage (if asked) and [DONE]."""
        yield self._data({"role": "assistant", "content": ""})
        reader = JobEventReader(
            self.state.event_store, self.job_id, block_ms=self.state.settings.sse_block_ms
        )
        async for ev in reader.events():
            text = progress_text(ev.type, ev.data)
            if text:
                yield self._data({"reasoning_content": text})
        try:
            result = await finished_result(self.state, self.owner, self.job_id)
        except OpenAIError as exc:
            # OpenAI streams report a failure as an error object in place of a chunk.
            yield {"data": json.dumps(exc.body())}
            yield {"data": "[DONE]"}
            return
        answer = result.answer or ""
        yield self._data({"content": answer, "annotations": citations(result, answer)})
        final = chunk(self.model, self.job_id, self.created, {}, "stop")
        final["parley"] = parley_object(self.job_id, result, self.base_url)
        yield {"data": json.dumps(final)}
        if self.include_usage:
            usage = chunk(self.model, self.job_id, self.created, {})
            usage["choices"] = []
            usage["usage"] = usage_object(result)
            yield {"data": json.dumps(usage)}
        yield {"data": "[DONE]"}

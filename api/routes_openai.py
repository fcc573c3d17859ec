"""``/v1/chat/completions`` and ``/v1/models``: Parley as an OpenAI-compatible model.

Same keys, rate limits, per-key job limits, token quotas and budgets as ``POST /v1/debates``: the
request becomes a ``DebateRequest`` and goes through the same service layer (``api.submission``).
Errors use OpenAI's error object with the status the REST routes would give, so OpenAI clients raise
their usual exceptions. A client that goes away before the answer (stream closed, request dropped)
cancels its debate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import anyio
import redis.exceptions
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from api.deps import ApiState, Owner, State
from api.openai_compat import (
    MODELS,
    ChatCompletionRequest,
    OpenAIError,
    chunk,
    citations,
    completion,
    debate_config,
    find_model,
    from_problem,
    from_validation,
    model_object,
    now,
    parley_object,
    progress_text,
    question_of,
    refuse_unsupported,
    usage_object,
)
from api.problems import Problem
from api.schemas import DebateRequest
from api.streams import SlottedEventSource, StreamSlot
from api.submission import admit_debate, cancel_job, owned_job, submit_debate
from engine.result import DebateResult
from services.jobstore import TERMINAL, TERMINAL_EVENTS, Event

log = logging.getLogger("parley.api")

DISCONNECTED = "the client closed the chat completion before the answer"


class OpenAIRoute(APIRoute):
    """A route whose every error (authentication, validation, limits, Redis down) is an OpenAI error
    object rather than problem+json: dependencies and body validation fail inside the handler, so
    they are caught here."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def openai_errors(request: Request) -> Response:
            try:
                return await handler(request)
            except OpenAIError as exc:
                return exc.response()
            except Problem as exc:
                return from_problem(exc).response()
            except RequestValidationError as exc:
                return from_validation([dict(e) for e in exc.errors()]).response()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError) as exc:
                retry = str(request.app.state.parley.settings.retry_after_s)
                err = OpenAIError(
                    503,
                    f"the job store is unavailable ({type(exc).__name__}); retry later",
                    code="unavailable",
                    headers={"Retry-After": retry},
                )
                return err.response()

        return openai_errors


# Not in the gateway's OpenAPI document: these routes follow OpenAI's API and error objects, not
# the problem+json contract that document (and the fuzzing against it) promises; docs/clients.md
# describes them.
router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute, include_in_schema=False)

OPENAI_ERROR = {"description": "OpenAI error object: {error: {message, type, param, code}}"}


@router.get("/models", responses={401: OPENAI_ERROR, 429: OPENAI_ERROR})
async def list_models(owner: Owner) -> JSONResponse:
    """Parley's models in OpenAI's list shape: one per protocol and one per evaluation preset."""
    return JSONResponse({"object": "list", "data": [model_object(m) for m in MODELS.values()]})


@router.get("/models/{model}", responses={401: OPENAI_ERROR, 404: OPENAI_ERROR})
async def get_model(model: str, owner: Owner) -> JSONResponse:
    """One model; an unknown name is 404 ``model_not_found``."""
    return JSONResponse(model_object(find_model(model)))


@router.post(
    "/chat/completions",
    responses={
        200: {
            "description": "a chat.completion; with stream=true, chat.completion.chunk events",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        400: OPENAI_ERROR,
        401: OPENAI_ERROR,
        404: OPENAI_ERROR,
        422: OPENAI_ERROR,
        429: OPENAI_ERROR,
        503: OPENAI_ERROR,
    },
)
async def chat_completions(request: Request, state: State, owner: Owner) -> Response:
    """Debate the last user message with the protocol the model names; answer as a chat completion.

    The body is read only once the key is known (FastAPI would parse a declared body first), so an
    unknown caller gets its 401 whatever it sent.
    """
    try:
        body = ChatCompletionRequest.model_validate_json(await request.body())
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
    base_url = str(request.base_url)
    if body.stream:
        events = CompletionEvents(state, owner, job.job_id, body.model, created, base_url, body.include_usage)
        return CancellingEventSource(
            events.chunks(),
            ping=int(state.settings.sse_ping_s),
            sep="\n",
            slots=state.streams,
            slot=slot,
            on_end=lambda: cancel_job(state, job.job_id, DISCONNECTED),
        )
    try:
        ended = await wait_for_end(state, request, job.job_id, slot)
    finally:
        with anyio.CancelScope(shield=True):
            await state.streams.release(slot)
    if ended is None:
        with anyio.CancelScope(shield=True):
            await cancel_job(state, job.job_id, DISCONNECTED)
        return Response(status_code=499)
    result = await finished_result(state, owner, job.job_id)
    return JSONResponse(completion(body.model, job.job_id, result, base_url, created))


async def wait_for_end(state: ApiState, request: Request, job_id: str, slot: StreamSlot) -> str | None:
    """Block on the job's events until it ends; its terminal status, or None if the client left."""
    renew_every = state.streams.slot_ttl_s / 3
    renewed = time.monotonic()
    block_ms = min(state.settings.sse_block_ms, 1000)
    cursor = "0-0"
    while True:
        events = await state.event_store.read_events(job_id, cursor, block_ms=block_ms)
        for ev in events:
            cursor = ev.id
            if ev.type in TERMINAL_EVENTS:
                return ev.type.removeprefix("job.")
        if not events:
            job = await state.event_store.get_job(job_id)
            if job is None or job.status in TERMINAL:
                return job.status if job is not None else "failed"
            if await request.is_disconnected():
                return None
        if time.monotonic() - renewed > renew_every:
            await state.streams.renew(slot)
            renewed = time.monotonic()


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


class CompletionEvents:
    """A job's event stream as ``chat.completion.chunk`` dicts for ``EventSourceResponse``."""

    def __init__(
        self,
        state: ApiState,
        owner: str,
        job_id: str,
        model: str,
        created: int,
        base_url: str,
        include_usage: bool,
    ) -> None:
        self.state = state
        self.owner = owner
        self.job_id = job_id
        self.model = model
        self.created = created
        self.base_url = base_url
        self.include_usage = include_usage

    def _data(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, str]:
        return {"data": json.dumps(chunk(self.model, self.job_id, self.created, delta, finish))}

    async def _events(self) -> AsyncIterator[Event]:
        store = self.state.event_store
        cursor = "0-0"
        while True:
            events = await store.read_events(self.job_id, cursor, block_ms=self.state.settings.sse_block_ms)
            for ev in events:
                cursor = ev.id
                yield ev
                if ev.type in TERMINAL_EVENTS:
                    return
            if not events:
                job = await store.get_job(self.job_id)
                if job is None or job.status in TERMINAL:
                    return

    async def chunks(self) -> AsyncIterator[dict[str, str]]:
        """Role, then progress as reasoning, then the answer, the stop, usage (if asked) and [DONE]."""
        yield self._data({"role": "assistant", "content": ""})
        async for ev in self._events():
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


class CancellingEventSource(SlottedEventSource):
    """An event stream that runs ``on_end`` however it ends: after a finished job that is a no-op,
    after a client that went away it cancels the job nobody is waiting for any more."""

    def __init__(self, *args: Any, on_end: Callable[[], Awaitable[object]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await asyncio.wait_for(self._on_end(), timeout=5)
                except Exception as exc:  # the store may be down; the sweeper ends orphaned jobs
                    log.warning("could not cancel the job of a closed chat completion: %s", exc)

"""``/v1/chat/completions`` and ``/v1/models``: Parley as an OpenAI-compatible model.

Same keys, rate limits, per-key job limits, token quotas and budgets as ``POST /v1/debates``: the
request becomes a ``DebateRequest`` and goes through the same service layer (``api.submission``).
Errors use OpenAI's error object with the status the REST routes would give, so OpenAI clients raise
their usual exceptions. A client that goes away before the answer (stream closed, request dropped)
cancels its debate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import redis.exceptions
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from api.chat import ChatStream, chat_completion
from api.deps import Owner, State
from api.errors import ServiceError
from api.openai_compat import (
    MODELS,
    OpenAIError,
    find_model,
    from_problem,
    from_validation,
    model_object,
)
from api.problems import Problem, problem_of
from api.streams import CancellingEventSource

log = logging.getLogger("parley.api")


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
            except ServiceError as exc:
                return from_problem(problem_of(exc)).response()
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
    out = await chat_completion(
        state, owner, await request.body(), str(request.base_url), request.is_disconnected
    )
    if isinstance(out, ChatStream):
        return CancellingEventSource(
            out.chunks,
            ping=int(state.settings.sse_ping_s),
            sep="\n",
            slots=state.streams,
            slot=out.slot,
            on_end=out.on_end,
        )
    if out is None:  # the client left before the answer; its debate was cancelled
        return Response(status_code=499)
    return JSONResponse(out)

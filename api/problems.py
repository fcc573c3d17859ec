"""RFC 9457 problem details: every error the API returns is ``application/problem+json``.

Redis (or the broker) being down is a 503 with ``Retry-After``, never a 500: the request was fine and
can simply be repeated later. The OpenAPI document says the same: every 4xx/5xx response is
documented as a ``Problem`` (``document_problems``), with the statuses every authenticated route, body
and ``Idempotency-Key`` can produce, so a client generated from the schema (or a fuzzer checking
responses against it) meets no undocumented status or content type.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError as KombuOperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from services.problem_details import PROBLEM_JSON, STATUS_TITLES, problem_response, validation_errors

log = logging.getLogger("parley.api")


class Problem(Exception):
    """Raise anywhere in a route to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        type_: str = "about:blank",
        title: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.type = type_
        self.title = title or STATUS_TITLES.get(status, "Error")
        self.headers = headers or {}
        self.extra = extra or {}


def unavailable(request: Request | None, retry_after_s: int, what: str) -> JSONResponse:
    return problem_response(
        request,
        503,
        f"{what} is unavailable; retry later",
        type_="/problems/unavailable",
        headers={"Retry-After": str(retry_after_s)},
    )


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: the methods of every route whose path matches the request's."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "RFC 9457 problem details; validation problems list each field in `errors`",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "URI reference naming the kind of problem"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "the request path"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
}

# What each status means on this API, for responses a route does not describe itself.
PROBLEM_DESCRIPTIONS = {
    400: "malformed request: a body that is not JSON, or a header value this API cannot read",
    401: "missing or unknown API key (WWW-Authenticate: Bearer)",
    404: "unknown id, or one of another key",
    409: "conflict with the resource's state, or an Idempotency-Key still in progress",
    413: "request body over the size limit",
    422: "invalid request; `errors` names each refused field",
    429: "rate limit, active-job limit, daily token quota or failed-authentication limit (Retry-After)",
    503: "the job store or broker is unavailable; retry after Retry-After seconds",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before retrying",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


def document_problems(openapi: dict[str, Any]) -> dict[str, Any]:
    """Document the problem responses every operation can give, all as ``application/problem+json``.

    Statuses come from what the request carries: a security requirement (401, 429), a body (400,
    413, 422), an ``Idempotency-Key`` (400, 409, 422), parameters (422); every route reads Redis
    (503). FastAPI's own ``HTTPValidationError`` 422 schema is replaced, since the handlers above
    answer validation errors as problems.
    """
    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM_SCHEMA
    for item in openapi.get("paths", {}).values():
        for op in item.values():
            if isinstance(op, dict) and "responses" in op:
                _document_operation(op)
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return openapi


def _problem_statuses(op: dict[str, Any]) -> set[int]:
    """The problem statuses an operation can give, from what its request carries."""
    statuses = {503}
    if op.get("security"):
        statuses |= {401, 429}
    if op.get("requestBody"):
        statuses |= {400, 413, 422}
    params = op.get("parameters", [])
    if params:
        statuses.add(422)
    headers = {p.get("name", "").lower() for p in params if p.get("in") == "header"}
    if "idempotency-key" in headers:
        statuses |= {400, 409, 422}
    return statuses


def _document_operation(op: dict[str, Any]) -> None:
    problem_content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    responses = op["responses"]
    for status in _problem_statuses(op):
        responses.setdefault(str(status), {})
    for code, response in responses.items():
        if not code.isdigit() or int(code) < 400:
            continue
        if response.get("description") in (None, "", "Additional Response"):
            response["description"] = PROBLEM_DESCRIPTIONS.get(int(code), "problem")
        response["content"] = problem_content
        if int(code) in (429, 503):
            response["headers"] = _RETRY_AFTER
    op["responses"] = dict(sorted(responses.items()))


def install_problem_handlers(app: FastAPI, retry_after_s: int) -> None:
    """Map every exception the app can raise to a problem document, and say so in the schema."""
    _document_in_openapi(app)

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(
            request,
            exc.status,
            exc.detail,
            type_=exc.type,
            title=exc.title,
            headers=exc.headers,
            extra=exc.extra,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route on the path; GET and DELETE are separate routes.
            headers["Allow"] = allowed_methods(request)
        return problem_response(request, exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = validation_errors(exc)
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"] if p != "body")
        return problem_response(
            request,
            422,
            f"{where + ': ' if where else ''}{first['msg']}",
            type_="/problems/validation",
            extra={"errors": errors},
        )

    async def _down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("backing store unavailable: %s: %s", type(exc).__name__, exc)
        return unavailable(request, retry_after_s, "the job store (Redis)")

    for exc_type in (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.BusyLoadingError,
        KombuOperationalError,
        ConnectionError,
        OSError,
    ):
        app.add_exception_handler(exc_type, _down)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return problem_response(request, 500, "internal error; see the server log")

    _install_store_full_handlers(app, retry_after_s, _unexpected)


def _document_in_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_problems(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _install_store_full_handlers(app: FastAPI, retry_after_s: int, unexpected: Any) -> None:
    """Redis at maxmemory with noeviction: a 503 /problems/store-full, logged at ERROR."""

    async def _store_full(request: Request, exc: Exception) -> JSONResponse:
        # Redis at maxmemory with noeviction refuses writes: the operator must act, so ERROR.
        log.error("the job store (Redis) is full and refuses writes on %s: %s", request.url.path, exc)
        return problem_response(
            request,
            503,
            "the job store is full and accepts no new work; retry later",
            type_="/problems/store-full",
            headers={"Retry-After": str(retry_after_s)},
        )

    async def _redis_error_reply(request: Request, exc: Exception) -> JSONResponse:
        # An OOM inside a script or a transaction arrives wrapped in a generic error reply.
        if "OOM command not allowed" in str(exc):
            return await _store_full(request, exc)
        response: JSONResponse = await unexpected(request, exc)
        return response

    app.add_exception_handler(redis.exceptions.OutOfMemoryError, _store_full)  # type: ignore[attr-defined]
    app.add_exception_handler(redis.exceptions.ResponseError, _redis_error_reply)

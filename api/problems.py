"""RFC 9457 problem details: every error the API returns is ``application/problem+json``.

Redis (or the broker) being down is a 503 with ``Retry-After``, never a 500: the request was fine and
can simply be repeated later. The OpenAPI document says the same (``api.openapi_doc``): every
4xx/5xx response is documented as a ``Problem`` with the problem types it can carry.
"""

from __future__ import annotations

import logging
from typing import Any, Unpack

import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError as KombuOperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api import errors
from api.openapi_doc import finish_document
from services.problem_details import ProblemOptions, logged_problem, problem_response, validation_errors

log = logging.getLogger("parley.api")

# What a request meets when the job store (or the broker) cannot be reached: a 503 with Retry-After,
# and the end of an event stream already open (``api.routes_debates``), never a 500.
STORE_UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    KombuOperationalError,
    ConnectionError,
    OSError,
)


class Problem(Exception):
    """Raise anywhere in a route to answer with a problem document."""

    def __init__(self, status: int, detail: str, **options: Unpack[ProblemOptions]) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.options = options

    @property
    def type(self) -> str:
        return self.options.get("type_", "about:blank")

    @property
    def headers(self) -> dict[str, str]:
        return self.options.get("headers") or {}

    @property
    def extra(self) -> dict[str, Any]:
        return self.options.get("extra") or {}

    def response(self, request: Request) -> JSONResponse:
        return problem_response(request, self.status, self.detail, **self.options)


# The one mapping from the service layer's typed errors to HTTP: status and problem type.
SERVICE_PROBLEMS: dict[type[errors.ServiceError], tuple[int, str]] = {
    errors.NotFound: (404, "/problems/not-found"),
    errors.AlreadyFinished: (409, "/problems/finished"),
    errors.PartOfBatch: (409, "/problems/batch-item"),
    errors.Invalid: (422, "/problems/validation"),
    errors.Refused: (422, "/problems/validation"),
    errors.InvalidBatch: (422, "/problems/invalid-batch"),
    errors.TooDeep: (400, "/problems/too-deep"),
    errors.MalformedJson: (400, "/problems/malformed-json"),
    errors.TooManyJobs: (429, "/problems/too-many-jobs"),
    errors.QuotaExceeded: (429, "/problems/quota-exceeded"),
    errors.TooManyStreams: (429, "/problems/too-many-streams"),
    errors.StorageTooLarge: (413, "/problems/storage-limit"),
    errors.StorageFull: (429, "/problems/storage-limit"),
    errors.IdempotencyKeyInvalid: (400, "/problems/idempotency-key-invalid"),
    errors.IdempotencyKeyReused: (422, "/problems/idempotency-key-reused"),
    errors.IdempotencyInProgress: (409, "/problems/idempotency-in-progress"),
}


def problem_of(exc: errors.ServiceError) -> Problem:
    """The problem a service error is answered with (its class, or the nearest mapped base)."""
    status, type_ = next(
        (SERVICE_PROBLEMS[cls] for cls in type(exc).__mro__ if cls in SERVICE_PROBLEMS),
        (500, "about:blank"),
    )
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    extra = {"errors": exc.errors} if exc.errors is not None else None
    return Problem(status, exc.detail, type_=type_, headers=headers, extra=extra)


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


def install_problem_handlers(app: FastAPI, retry_after_s: int) -> None:
    """Map every exception the app can raise to a problem document, and say so in the schema."""
    _document_in_openapi(app)

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return exc.response(request)

    @app.exception_handler(errors.ServiceError)
    async def _service(request: Request, exc: errors.ServiceError) -> JSONResponse:
        return await _problem(request, problem_of(exc))

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

    for exc_type in STORE_UNAVAILABLE:
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
            app.openapi_schema = finish_document(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _install_store_full_handlers(app: FastAPI, retry_after_s: int, unexpected: Any) -> None:
    """Redis at maxmemory with noeviction: a 503 /problems/store-full, logged at ERROR."""

    # Redis at maxmemory with noeviction refuses writes: the operator must act, so ERROR.
    _store_full = logged_problem(
        log,
        "the job store (Redis) is full and refuses writes",
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

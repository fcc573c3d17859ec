"""RFC 9457 problem details: every error the API returns is ``application/problem+json``.

Redis (or the broker) being down is a 503 with ``Retry-After``, never a 500: the request was fine and
can simply be repeated later.
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

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("parley.api")

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


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
        self.title = title or _TITLES.get(status, "Error")
        self.headers = headers or {}
        self.extra = extra or {}


def problem_response(
    request: Request | None,
    status: int,
    detail: str,
    *,
    type_: str = "about:blank",
    title: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": type_,
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if request is not None:
        body["instance"] = request.url.path
    body.update(extra or {})
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def unavailable(request: Request | None, retry_after_s: int, what: str) -> JSONResponse:
    return problem_response(
        request,
        503,
        f"{what} is unavailable; retry later",
        type_="/problems/unavailable",
        headers={"Retry-After": str(retry_after_s)},
    )


def install_problem_handlers(app: FastAPI, retry_after_s: int) -> None:
    """Map every exception the app can raise to a problem document."""

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
        return problem_response(request, exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
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

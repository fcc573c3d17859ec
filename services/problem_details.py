"""RFC 9457 problem details, the one error format of both FastAPI apps (the gateway and the retriever).

Each app maps its own exceptions to statuses and titles; the document they answer with, its media type
and the list of field errors a validation problem carries are built here, so both speak the same shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict, Unpack

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

PROBLEM_JSON = "application/problem+json"

# Problem types of the retriever, shared with its client (which tells errors apart by type).
INDEX_MISSING = "/problems/index-missing"
STORE_UNAVAILABLE = "/problems/store-unavailable"
BM25_UNAVAILABLE = "/problems/bm25-unavailable"
INVALID_REQUEST = "/problems/invalid-request"
NOT_FOUND = "/problems/not-found"
INTERNAL = "/problems/internal"
UNAUTHORIZED = "/problems/unauthorized"

STATUS_TITLES = {
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


class ProblemOptions(TypedDict, total=False):
    """A problem document's parts besides its status and detail: ``type_`` (a URI reference,
    ``about:blank`` when absent), ``title`` (the status's name when absent), response headers and
    ``extra`` members."""

    type_: str
    title: str | None
    headers: dict[str, str] | None
    extra: dict[str, Any] | None


def problem_response(
    request: Request | None, status: int, detail: str, **options: Unpack[ProblemOptions]
) -> JSONResponse:
    """The problem document for ``status``; ``instance`` is the request's path when there is one."""
    body: dict[str, Any] = {
        "type": options.get("type_", "about:blank"),
        "title": options.get("title") or STATUS_TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if request is not None:
        body["instance"] = request.url.path
    body.update(options.get("extra") or {})
    headers = options.get("headers")
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


ProblemHandler = Callable[[Request, Exception], Awaitable[JSONResponse]]


def logged_problem(
    logger: logging.Logger, what: str, status: int, detail: str, **options: Unpack[ProblemOptions]
) -> ProblemHandler:
    """An exception handler for a failure the operator must see and the caller must not read: ``what``,
    the request's path and the error's text (it can name hosts, paths or credentials) go to ``logger``
    at ERROR; the caller gets ``detail``."""

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        logger.error("%s on %s: %s", what, request.url.path, exc)
        return problem_response(request, status, detail, **options)

    return handler


def validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Each refused field as ``{"loc", "msg", "type"}`` (a validation problem's ``errors``)."""
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]

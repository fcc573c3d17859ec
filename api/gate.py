"""Authentication and the per-key rate limit before a single byte of the body is read.

FastAPI reads a request's body before it resolves the route's dependencies, so a key checked in a
dependency is checked only after an unknown caller has made the gateway receive (and buffer) up to
``max_batch_bytes``. ``AuthGateMiddleware`` runs first instead: on the Parley API's own paths it
checks the key, the failed-authentication limit and the key's rate limit from the headers alone and
answers 401/429 at once, leaving the body unread; the owner it found is handed to the route's ``Owner``
dependency through the request's state, so a request is counted once.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.guards import PUBLIC_OWNER, AuthFailureLimiter, KeyRing, RateLimiter
from api.openai_compat import from_problem
from api.problems import Problem

OWNER_STATE = "parley_owner"
# The routes whose bodies are Parley's own (refusals as problem+json), and the OpenAI-compatible ones
# (refusals as OpenAI error objects); the page and health need no key.
GATED_PREFIXES = ("/v1/debates", "/v1/batches", "/v1/usage")
OPENAI_PREFIXES = ("/v1/chat/completions", "/v1/models")


async def authenticate(
    keys: KeyRing,
    failures: AuthFailureLimiter,
    limiter: RateLimiter,
    authorization: str | None,
    address: str,
) -> str:
    """The owner of ``authorization``, after the failed-auth and rate limits; raises a ``Problem``.

    The key is checked first (in memory, constant time), so a valid key is never refused because
    others behind the same address sent wrong ones (see ``AuthFailureLimiter``).
    """
    if keys.open:
        owner = PUBLIC_OWNER
    else:
        try:
            owner = keys.owner(authorization)
        except Problem:
            await failures.failed(address, authorization)
            raise
        await failures.succeeded(address, owner)
    await limiter.check(owner)
    return owner


async def _handled(scope: Scope, exc: Exception) -> Response:
    """The response the app's exception handler for ``exc`` gives (its class or nearest base)."""
    handlers = scope["app"].exception_handlers
    for cls in type(exc).__mro__:
        handler = handlers.get(cls)
        if handler is not None:
            response = handler(Request(scope), exc)
            return await response if inspect.isawaitable(response) else response
    raise exc


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class AuthGateMiddleware:
    """401/429 from the headers alone on ``prefixes``, before the app (or anyone) reads the body."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        prefixes: Sequence[str] = GATED_PREFIXES,
        openai_prefixes: Sequence[str] = OPENAI_PREFIXES,
    ) -> None:
        self.app = app
        self.prefixes = tuple(prefixes)
        self.openai_prefixes = tuple(openai_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        openai = path.startswith(self.openai_prefixes)
        if not (openai or path.startswith(self.prefixes)):
            await self.app(scope, receive, send)
            return
        state: Any = scope["app"].state.parley
        client = scope.get("client")
        address = client[0] if client else "unknown"
        try:
            owner = await authenticate(
                state.keys, state.auth_failures, state.limiter, _header(scope, b"authorization"), address
            )
        except Exception as exc:
            # The app's own handlers answer: a Problem as its problem document, Redis down as 503,
            # Redis full as 503 store-full, exactly as if a dependency had raised it; on the
            # OpenAI-compatible routes a Problem becomes OpenAI's error object.
            if openai and isinstance(exc, Problem):
                response: Response = from_problem(exc).response()
            else:
                response = await _handled(scope, exc)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[OWNER_STATE] = owner
        await self.app(scope, receive, send)

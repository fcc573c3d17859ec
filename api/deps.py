"""FastAPI dependencies as ``Annotated`` aliases; the objects behind them are built in ``lifespan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.enqueue import Enqueuer
from api.guards import AuthFailureLimiter, Idempotency, KeyRing, RateLimiter
from api.problems import Problem
from api.settings import ApiSettings
from api.streams import StreamSlots
from services.jobstore import JobStore


@dataclass
class ApiState:
    """Long-lived objects shared by all requests of one API process."""

    settings: ApiSettings
    store: JobStore
    enqueuer: Enqueuer
    keys: KeyRing
    limiter: RateLimiter
    idempotency: Idempotency
    auth_failures: AuthFailureLimiter
    # The same store on the event streams' own Redis pool (blocking reads), and their caps.
    event_store: JobStore
    streams: StreamSlots


def get_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.parley
    return state


# Declares the scheme in the OpenAPI document (every authenticated operation then lists it); the key
# itself is checked by the KeyRing, which also knows the open mode without keys.
BEARER = HTTPBearer(auto_error=False, scheme_name="apiKey", description="Authorization: Bearer <API key>")


async def get_owner(
    request: Request, _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
) -> str:
    """Authenticate the caller and charge the request to its rate limit; returns the owner name.

    Failed authentications count against the client address, which is refused for the rest of the
    minute once it has failed too often.
    """
    state = get_state(request)
    address = request.client.host if request.client else "unknown"
    if not state.keys.open:
        await state.auth_failures.check(address)
    try:
        owner = state.keys.owner(request.headers.get("authorization"))
    except Problem:
        await state.auth_failures.failed(address)
        raise
    await state.limiter.check(owner)
    return owner


State = Annotated[ApiState, Depends(get_state)]
Owner = Annotated[str, Depends(get_owner)]

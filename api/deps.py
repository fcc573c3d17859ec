"""FastAPI dependencies as ``Annotated`` aliases; the objects behind them are built in ``lifespan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.enqueue import Enqueuer
from api.gate import OWNER_STATE, authenticate
from api.guards import AuthFailureLimiter, Idempotency, KeyRing, RateLimiter
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
    # Bytes of Redis one key may fill (storage_bytes_per_key, or its share of maxmemory); None = no cap.
    storage_cap: int | None = None


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

    On the gated paths ``AuthGateMiddleware`` did this before the body was read and left the owner in
    the request's state; elsewhere it is done here, the same way.
    """
    owner = request.scope.get("state", {}).get(OWNER_STATE)
    if isinstance(owner, str):
        return owner
    state = get_state(request)
    address = request.client.host if request.client else "unknown"
    return await authenticate(
        state.keys, state.auth_failures, state.limiter, request.headers.get("authorization"), address
    )


State = Annotated[ApiState, Depends(get_state)]
Owner = Annotated[str, Depends(get_owner)]
# An Idempotency-Key as the schema documents it: 1 to 255 characters (a longer one is refused with 422).
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=255,
        description="repeat the request safely: the first response is stored and replayed for 24 h; "
        "the same key with another body is refused (422 /problems/idempotency-key-reused), while the "
        "first is still running it is a 409 (/problems/idempotency-in-progress)",
    ),
]

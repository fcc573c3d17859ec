"""``/v1/usage``: what the calling key has used today and the limits that apply to it."""

from __future__ import annotations

from fastapi import APIRouter, Query

from api.deps import Owner, State
from api.schemas import UsageView
from api.usage import key_usage

router = APIRouter(prefix="/v1/usage", tags=["usage"])


@router.get("", response_model=UsageView)
async def get_usage(
    state: State,
    owner: Owner,
    days: int = Query(default=7, ge=1, le=8, description="how many days of history, today included"),
) -> UsageView:
    """Token use and reservations of the calling key, and the limits that apply to it."""
    return await key_usage(state, owner, days)

"""``/v1/usage``: what the calling key has used today and the limits that apply to it."""

from __future__ import annotations

import time

from fastapi import APIRouter, Query

from api.deps import Owner, State
from api.schemas import Limits, UsageView
from services.jobstore import usage_day

router = APIRouter(prefix="/v1/usage", tags=["usage"])


@router.get("", response_model=UsageView)
async def get_usage(
    state: State,
    owner: Owner,
    days: int = Query(default=7, ge=1, le=8, description="how many days of history, today included"),
) -> UsageView:
    """Token use and reservations of the calling key, and the limits that apply to it."""
    now = time.time()
    history = [await state.store.usage(owner, usage_day(now - 86400 * d)) for d in range(days)]
    today = history[0]
    quota = state.settings.token_quota(owner)
    stored, _ = await state.store.stored_bytes(owner)
    s = state.settings
    return UsageView(
        owner=owner,
        today=today,
        remaining_today=None if quota is None else max(0, quota - today.tokens - today.reserved),
        days=history,
        stored_bytes=stored,
        limits=Limits(
            rate_limit_per_minute=s.rate_limit_per_minute,
            max_active_jobs=s.max_active_jobs_per_key,
            active_jobs=await state.store.active_count(owner),
            daily_token_quota=quota,
            budget_calls_default=s.budget_calls_default,
            budget_calls_max=s.budget_calls_max,
            budget_tokens_default=s.budget_tokens_default,
            budget_tokens_max=s.budget_tokens_max,
            storage_bytes=state.storage_cap,
        ),
    )

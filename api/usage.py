"""What a key has used and the limits that apply to it (the service under ``GET /v1/usage``)."""

from __future__ import annotations

import time

from api.deps import ApiState
from api.schemas import Limits, UsageView
from services.jobstore import usage_day

# The limits a key sees exactly as configured, under the settings' own names.
_LIMITS_AS_CONFIGURED = {
    "rate_limit_per_minute",
    "budget_calls_default",
    "budget_calls_max",
    "budget_tokens_default",
    "budget_tokens_max",
}


async def key_usage(state: ApiState, owner: str, days: int) -> UsageView:
    """Token use and reservations of ``owner`` over the last ``days`` UTC days (today first), what it
    keeps in the job store, and its limits."""
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
            **s.model_dump(include=_LIMITS_AS_CONFIGURED),
            max_active_jobs=s.max_active_jobs_per_key,
            active_jobs=await state.store.active_count(owner),
            daily_token_quota=quota,
            storage_bytes=state.storage_cap,
        ),
    )

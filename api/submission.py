"""The gateway's service layer for debates: how a job enters the system, is found again and is cancelled.

The REST routes (``/v1/debates``, ``/v1/batches``) and the OpenAI-compatible route
(``/v1/chat/completions``) all go through these functions, so every surface applies the same
admission rules, per-key limits, token quotas and budgets to the same keys.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse

from api.admission import admit_config, admit_pool, admit_storage
from api.deps import ApiState
from api.guards import StoredResponse
from api.problems import Problem
from api.schemas import DebateRequest, JobView, Progress
from engine.config import DebateConfig
from services.jobstore import ACTIVE, BatchRecord, JobFull, JobRecord, new_id, usage_day
from services.metrics import REFUSALS
from services.task_queue import QUEUE_INTERACTIVE


def fingerprint(body: bytes, *parts: str) -> str:
    h = hashlib.sha256(body)
    for p in parts:
        h.update(p.encode())
    return h.hexdigest()


async def idempotent(
    state: ApiState,
    owner: str,
    key: str | None,
    fp: str,
    handler: Callable[[], Awaitable[StoredResponse]],
) -> JSONResponse:
    """Run ``handler`` once per ``Idempotency-Key``; later requests with the key get its response."""
    if key is None:
        out = await handler()
        return JSONResponse(out.body, status_code=out.status, headers=out.headers)
    stored = await state.idempotency.begin(owner, key, fp)
    if stored is not None:
        headers = {**stored.headers, "Idempotent-Replayed": "true"}
        return JSONResponse(stored.body, status_code=stored.status, headers=headers)
    try:
        out = await handler()
    except BaseException:
        await state.idempotency.abandon(owner, key)
        raise
    await state.idempotency.finish(owner, key, fp, out)
    return JSONResponse(out.body, status_code=out.status, headers=out.headers)


def seconds_to_next_day(now: float | None = None) -> int:
    now = time.time() if now is None else now
    return max(1, int(86400 - now % 86400) + 1)


async def submit_jobs(
    state: ApiState, owner: str, jobs: list[JobRecord], queue: str, batch: BatchRecord | None = None
) -> list[JobRecord]:
    """The one way jobs enter the system: limits checked, tokens reserved, stored, queued.

    All or nothing: a refusal stores nothing, and a failure after storing removes the jobs and gives
    their reservation back, so nothing is left waiting that no worker will ever run.
    """
    await check_capacity(state, owner, len(jobs))
    await admit_storage(state.store, state.storage_cap, owner, jobs, batch)
    day = usage_day()
    per_job = int(jobs[0].config.get("budget_tokens") or 0) if jobs else 0
    amount = per_job * len(jobs)
    quota = state.settings.token_quota(owner)
    if await state.store.reserve_tokens(owner, day, amount, quota) is None:
        used = await state.store.usage(owner, day)
        REFUSALS.labels("quota", owner).inc()
        raise Problem(
            429,
            f"this key's daily token quota of {quota} would be exceeded: {used.tokens} used and "
            f"{used.reserved} reserved today; this request reserves {amount} ({len(jobs)} job(s) x "
            f"{per_job} budget tokens). Ask for a smaller budget_tokens or wait for the next UTC day.",
            type_="/problems/quota-exceeded",
            headers={"Retry-After": str(seconds_to_next_day())},
        )
    jobs = [j.model_copy(update={"reserved_tokens": per_job, "usage_day": day}) for j in jobs]
    try:
        await state.store.create_jobs(jobs, batch)
    except BaseException:
        await state.store.release_tokens(owner, day, amount)
        raise
    try:
        await state.enqueuer.enqueue([j.job_id for j in jobs], queue)
    except BaseException:
        # Not queued means not accepted: remove the records so no job is left waiting forever.
        await state.store.delete_jobs([j.job_id for j in jobs], batch.batch_id if batch else None)
        await state.store.release_tokens(owner, day, amount)
        raise
    return jobs


def admit_debate(state: ApiState, body: DebateRequest, *, field: str = "config") -> DebateConfig:
    """The request's config as it will run (operator endpoints, budgets, pool checked), or a 422.

    ``field`` names the config in refusals (``parley`` on the OpenAI-compatible route).
    """
    config = admit_config(body.config, state.settings, field=field)
    admit_pool(config, body.pool)
    return config


async def submit_debate(state: ApiState, owner: str, body: DebateRequest, config: DebateConfig) -> JobRecord:
    """Queue one admitted debate (``admit_debate``) as an interactive job."""
    job = JobRecord(
        job_id=new_id("job"),
        owner=owner,
        question=body.question,
        answers=body.answers,
        config=config.model_dump(mode="json"),
        pool=[item.model_dump(mode="json") for item in body.pool] if body.pool is not None else None,
        queue=QUEUE_INTERACTIVE,
        rounds=config.rounds,
    )
    await submit_jobs(state, owner, [job], QUEUE_INTERACTIVE)
    return job


async def check_capacity(state: ApiState, owner: str, adding: int) -> None:
    """429 when the owner's unfinished jobs plus ``adding`` exceed the per-key limit."""
    limit = state.settings.max_active_jobs_per_key
    active = await state.store.active_count(owner)
    if active + adding > limit:
        raise Problem(
            429,
            f"this key has {active} unfinished jobs; adding {adding} would exceed its limit of {limit}",
            type_="/problems/too-many-jobs",
            headers={"Retry-After": "30"},
        )


async def owned_job(state: ApiState, owner: str, job_id: str, *, with_result: bool = False) -> JobFull:
    found = (await state.store.get_jobs([job_id], with_result=with_result))[0]
    if found is None or found.job.owner != owner:
        raise Problem(404, f"no debate {job_id!r}", type_="/problems/not-found")
    return found


async def cancel_job(state: ApiState, job_id: str, reason: str) -> bool:
    """Move an unfinished job to ``cancelled`` (a running worker notices within a second and stops);
    False when it had already finished."""
    return await state.store.transition(
        job_id, "cancelled", ACTIVE, event="job.cancelled", data={"reason": reason}
    )


async def cancel_owned_debate(state: ApiState, owner: str, job_id: str) -> JobFull:
    """Cancel ``owner``'s debate and return it as it stands; 404 for another key's or a missing job,
    409 when it had already finished (a completed result is never overwritten)."""
    await owned_job(state, owner, job_id)
    ok = await cancel_job(state, job_id, "cancelled by the client")
    found = await owned_job(state, owner, job_id, with_result=True)
    if not ok and found.job.status != "cancelled":
        raise Problem(
            409,
            f"debate {job_id!r} already {found.job.status}; nothing to cancel",
            type_="/problems/finished",
        )
    return found


def job_view(job: JobRecord, result: dict[str, Any] | None) -> JobView:
    return JobView(
        job_id=job.job_id,
        status=job.status,
        question=job.question,
        config=job.config,
        progress=Progress(round=job.round, rounds=job.rounds),
        attempts=job.attempts,
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        batch_id=job.batch_id,
        item_id=job.item_id,
        error=job.error,
        result=result,
    )

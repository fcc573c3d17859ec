"""The gateway's service layer for debates: how a job enters the system, is found again, is cancelled
and is deleted.

The REST routes (``/v1/debates``, ``/v1/batches``) and the OpenAI-compatible route
(``/v1/chat/completions``) all go through these functions, so every surface applies the same
admission rules, per-key limits, token quotas and budgets to the same keys.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from api.admission import admit_config, admit_pool, admit_storage
from api.deps import ApiState
from api.errors import AlreadyFinished, Invalid, NotFound, PartOfBatch, QuotaExceeded, TooManyJobs
from api.guards import StoredResponse
from api.schemas import Accepted, DebateDeleted, DebateRequest, JobView, Progress, as_json_types
from api.streams import JobEventReader, StreamSlot
from engine.config import DebateConfig
from services.jobstore import ACTIVE, BatchRecord, Event, JobFull, JobRecord, new_id, usage_day
from services.observability.metrics import REFUSALS
from services.redis_connect import NotReplicated
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
) -> StoredResponse:
    """Run ``handler`` once per ``Idempotency-Key``; later requests with the key get its response
    (its headers then say ``Idempotent-Replayed: true``)."""
    if key is None:
        return await handler()
    stored = await state.idempotency.begin(owner, key, fp)
    if stored is not None:
        headers = {**stored.headers, "Idempotent-Replayed": "true"}
        return StoredResponse(stored.status, stored.body, headers)
    try:
        out = await handler()
    except BaseException:
        await state.idempotency.abandon(owner, key)
        raise
    await state.idempotency.finish(owner, key, fp, out)
    return out


def strictly(model: type[BaseModel], raw: bytes) -> None:
    """``Invalid`` unless ``raw`` is ``model`` exactly as the schema says: no ``false`` taken for the
    number 0, no ``"2"`` for the integer 2 (the lax parse that built the request allows both)."""
    try:
        model.model_validate(as_json_types(json.loads(raw)), strict=True)
    except ValidationError as exc:
        found = [
            {"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False)
        ]
        where = ".".join(str(p) for p in found[0]["loc"][1:])
        raise Invalid(f"{where + ': ' if where else ''}{found[0]['msg']}", errors=found) from exc


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
        raise QuotaExceeded(
            f"this key's daily token quota of {quota} would be exceeded: {used.tokens} used and "
            f"{used.reserved} reserved today; this request reserves {amount} ({len(jobs)} job(s) x "
            f"{per_job} budget tokens). Ask for a smaller budget_tokens or wait for the next UTC day.",
            retry_after_s=seconds_to_next_day(),
        )
    jobs = [j.model_copy(update={"reserved_tokens": per_job, "usage_day": day}) for j in jobs]
    try:
        await state.store.create_jobs(jobs, batch)
    except BaseException:
        await state.store.release_tokens(owner, day, amount)
        raise
    try:
        await state.enqueuer.enqueue([j.job_id for j in jobs], queue)
        # PARLEY_API_REDIS_WAIT_REPLICAS: accepted only once a failover can no longer take it back.
        what = f"batch {batch.batch_id}" if batch else f"job {jobs[0].job_id}"
        if not await state.store.replicated(what):
            raise NotReplicated(f"{what} did not reach its replicas in time; not accepted")
    except BaseException:
        # Not queued means not accepted: remove the records so no job is left waiting forever.
        await state.store.delete_jobs([j.job_id for j in jobs], batch.batch_id if batch else None)
        await state.store.release_tokens(owner, day, amount)
        raise
    return jobs


def admit_debate(state: ApiState, body: DebateRequest, *, field: str = "config") -> DebateConfig:
    """The request's config as it will run (operator endpoints, budgets, pool checked), or ``Refused``.

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


async def accept_debate(
    state: ApiState, owner: str, body: DebateRequest, raw: bytes, idempotency_key: str | None, path: str
) -> StoredResponse:
    """``POST /v1/debates``: the config admitted, then the debate queued once per ``Idempotency-Key``
    (a repeat with the same body gets the first answer); 202 with the job's ``Location``."""
    strictly(DebateRequest, raw)
    config = admit_debate(state, body)

    async def handler() -> StoredResponse:
        job = await submit_debate(state, owner, body, config)
        location = f"/v1/debates/{job.job_id}"
        accepted = Accepted(job_id=job.job_id, status="queued", location=location)
        return StoredResponse(202, accepted.model_dump(), {"Location": location})

    return await idempotent(state, owner, idempotency_key, fingerprint(raw, path), handler)


async def check_capacity(state: ApiState, owner: str, adding: int) -> None:
    """``TooManyJobs`` when the owner's unfinished jobs plus ``adding`` exceed the per-key limit."""
    limit = state.settings.max_active_jobs_per_key
    active = await state.store.active_count(owner)
    if active + adding > limit:
        raise TooManyJobs(
            f"this key has {active} unfinished jobs; adding {adding} would exceed its limit of {limit}",
            retry_after_s=30,
        )


async def owned_job(state: ApiState, owner: str, job_id: str, *, with_result: bool = False) -> JobFull:
    """The job if ``owner`` has it; ``NotFound`` for a missing one and for another key's alike."""
    found = (await state.store.get_jobs([job_id], with_result=with_result))[0]
    if found is None or found.job.owner != owner:
        raise NotFound(f"no debate {job_id!r}")
    return found


async def cancel_job(state: ApiState, job_id: str, reason: str) -> bool:
    """Move an unfinished job to ``cancelled`` (a running worker notices within a second and stops);
    False when it had already finished."""
    return await state.store.transition(
        job_id, "cancelled", ACTIVE, event="job.cancelled", data={"reason": reason}
    )


async def cancel_owned_debate(state: ApiState, owner: str, job_id: str) -> JobFull:
    """Cancel ``owner``'s debate and return it as it stands; ``NotFound`` for another key's or a
    missing job, ``AlreadyFinished`` when it had finished (a completed result is never overwritten)."""
    await owned_job(state, owner, job_id)
    ok = await cancel_job(state, job_id, "cancelled by the client")
    found = await owned_job(state, owner, job_id, with_result=True)
    if not ok and found.job.status != "cancelled":
        raise AlreadyFinished(f"debate {job_id!r} already {found.job.status}; nothing to cancel")
    return found


async def delete_owned_debate(state: ApiState, owner: str, job_id: str) -> DebateDeleted:
    """Delete ``owner``'s debate for good: cancelled first if it is still queued or running (its
    worker stops as it would for a cancel), then removed, so a later ``GET`` is 404, and the
    ``Idempotency-Key`` response that created it is forgotten. The tokens it used stay charged to the
    key. ``NotFound`` for a missing job or another key's; ``PartOfBatch`` for an
    item of a batch (results are read by batch, so an item goes with its batch)."""
    job = (await owned_job(state, owner, job_id)).job
    if job.batch_id is not None:
        raise PartOfBatch(
            f"debate {job_id!r} is item {job.item_id!r} of batch {job.batch_id!r}: delete the batch "
            f"(DELETE /v1/batches/{job.batch_id}) or cancel the item (POST /v1/debates/{job_id}/cancel)"
        )
    await cancel_job(state, job_id, "deleted by the client")
    if not await state.store.remove_job(job_id):
        raise NotFound(f"no debate {job_id!r}")  # deleted by a request that ran alongside this one
    # A replay of the request that created it would point at nothing: it is forgotten too.
    await state.idempotency.forget(owner, f"/v1/debates/{job_id}")
    return DebateDeleted(id=job_id)


async def open_events(
    state: ApiState, owner: str, job_id: str, start: str, disconnected: Callable[[], Awaitable[bool]]
) -> tuple[StreamSlot, AsyncIterator[Event]]:
    """``owner``'s job's events after ``start`` (``NotFound`` otherwise), read through the event
    streams' own Redis pool under a stream slot (``TooManyStreams`` past the caps); the caller's
    stream gives the slot back when it ends."""
    await owned_job(state, owner, job_id)
    slot = await state.streams.acquire(owner)
    reader = JobEventReader(
        state.event_store, job_id, start, block_ms=state.settings.sse_block_ms, disconnected=disconnected
    )
    return slot, reader.events()


# The view shows each of these as the record stores it, under the same name; what it adds is the
# progress (the record's round and rounds) and the result, which is stored apart.
_JOB_VIEW_FROM_RECORD = JobView.model_fields.keys() & JobRecord.model_fields.keys()


def job_view(job: JobRecord, result: dict[str, Any] | None) -> JobView:
    return JobView(
        **job.model_dump(include=_JOB_VIEW_FROM_RECORD),
        progress=Progress(round=job.round, rounds=job.rounds),
        result=result,
    )

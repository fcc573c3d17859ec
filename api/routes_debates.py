"""``/v1/debates``: submit one debate, read its status and result, stream its events, cancel it."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse

from api.admission import admit_config, admit_pool
from api.deps import ApiState, Owner, State
from api.guards import StoredResponse
from api.problems import Problem
from api.schemas import Accepted, DebateRequest, JobView, Progress
from api.streams import SlottedEventSource
from debate_worker.worker_settings import QUEUE_INTERACTIVE
from services.jobstore import (
    ACTIVE,
    TERMINAL,
    TERMINAL_EVENTS,
    BatchRecord,
    JobFull,
    JobRecord,
    new_id,
    usage_day,
)
from services.metrics import REFUSALS

router = APIRouter(prefix="/v1/debates", tags=["debates"])

NOT_FOUND = {"model": None, "description": "unknown id, or a job of another key (problem+json)"}


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


@router.post(
    "",
    status_code=202,
    response_model=Accepted,
    responses={429: {"description": "rate or queue limit (Retry-After)"}, 503: {"description": "Redis down"}},
)
async def create_debate(
    body: DebateRequest,
    request: Request,
    state: State,
    owner: Owner,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Queue one debate; answers 202 with the job id and a ``Location`` to poll."""

    config = admit_config(body.config, state.settings)
    admit_pool(config, body.pool)

    async def handler() -> StoredResponse:
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
        location = f"/v1/debates/{job.job_id}"
        accepted = Accepted(job_id=job.job_id, status="queued", location=location)
        return StoredResponse(202, accepted.model_dump(), {"Location": location})

    raw = await request.body()
    return await idempotent(state, owner, idempotency_key, fingerprint(raw, request.url.path), handler)


def job_response(found: JobFull, status_code: int = 200) -> Response:
    """The ``JobView`` document with the stored result JSON spliced in unparsed."""
    head = job_view(found.job, None).model_dump_json(exclude={"result"})
    body = f'{head[:-1]},"result":{found.result_json or "null"}}}'
    return Response(body, status_code=status_code, media_type="application/json")


@router.get(
    "/{job_id}",
    response_model=JobView,
    response_class=Response,
    responses={200: {"model": JobView, "content": {"application/json": {}}}, 404: NOT_FOUND},
)
async def get_debate(job_id: str, state: State, owner: Owner) -> Response:
    """Status, progress (last completed round) and, once completed, the result with its transcript."""
    return job_response(await owned_job(state, owner, job_id, with_result=True))


@router.delete(
    "/{job_id}",
    response_model=JobView,
    response_class=Response,
    responses={404: NOT_FOUND, 409: {"description": "finished"}},
)
async def cancel_debate(job_id: str, state: State, owner: Owner) -> Response:
    """Cancel a queued or running debate; a running worker notices within a second and stops."""
    await owned_job(state, owner, job_id)
    ok = await state.store.transition(
        job_id, "cancelled", ACTIVE, event="job.cancelled", data={"reason": "cancelled by the client"}
    )
    found = await owned_job(state, owner, job_id, with_result=True)
    if not ok and found.job.status != "cancelled":
        raise Problem(
            409,
            f"debate {job_id!r} already {found.job.status}; nothing to cancel",
            type_="/problems/finished",
        )
    return job_response(found)


@router.get(
    "/{job_id}/events",
    responses={
        200: {"content": {"text/event-stream": {}}},
        400: {"description": "Last-Event-ID (or after) is not an event id of this API"},
        404: NOT_FOUND,
        429: {"description": "too many open event streams for this key or server (Retry-After)"},
    },
    response_class=EventSourceResponse,
)
async def debate_events(
    job_id: str,
    request: Request,
    state: State,
    owner: Owner,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[str | None, Query(description="resume after this event id (= Last-Event-ID)")] = None,
) -> EventSourceResponse:
    """Server-Sent Events of the job; reconnect with ``Last-Event-ID`` to resume without gaps.

    The stream ends after ``job.completed``, ``job.failed`` or ``job.cancelled``.
    """
    await owned_job(state, owner, job_id)
    start = last_event_id or after or "0-0"
    if not _valid_stream_id(start):
        raise Problem(400, f"Last-Event-ID {start!r} is not an event id of this API")
    # The stream reads through the event streams' own Redis pool; a slot per stream caps them.
    store = state.event_store
    block_ms = state.settings.sse_block_ms
    slot = await state.streams.acquire(owner)

    async def stream() -> AsyncIterator[dict[str, str]]:
        cursor = start
        while True:
            events = await store.read_events(job_id, cursor, block_ms=block_ms)
            for ev in events:
                cursor = ev.id
                yield {"id": ev.id, "event": ev.type, "data": json.dumps(ev.data)}
                if ev.type in TERMINAL_EVENTS:
                    return
            if not events:
                job = await store.get_job(job_id)
                if job is None or job.status in TERMINAL:
                    # Resumed after the terminal event (or the job expired): nothing more will come.
                    return
                if await request.is_disconnected():
                    return

    return SlottedEventSource(stream(), ping=int(state.settings.sse_ping_s), slots=state.streams, slot=slot)


def _valid_stream_id(value: str) -> bool:
    head, _, tail = value.partition("-")
    return head.isdigit() and (tail == "" or tail.isdigit())

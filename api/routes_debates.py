"""``/v1/debates``: submit one debate, read its status and result, stream its events, cancel it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse

from api.deps import ApiState, Owner, State
from api.guards import StoredResponse
from api.problems import Problem
from api.schemas import Accepted, DebateRequest, JobView, Progress
from debate_worker.worker_settings import QUEUE_INTERACTIVE
from services.jobstore import ACTIVE, TERMINAL, TERMINAL_EVENTS, JobFull, JobRecord, new_id

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

    async def handler() -> StoredResponse:
        await check_capacity(state, owner, 1)
        job = JobRecord(
            job_id=new_id("job"),
            owner=owner,
            question=body.question,
            answers=body.answers,
            config=body.config.model_dump(mode="json"),
            queue=QUEUE_INTERACTIVE,
            rounds=body.config.rounds,
        )
        await state.store.create_jobs([job])
        try:
            await state.enqueuer.enqueue([job.job_id], QUEUE_INTERACTIVE)
        except BaseException:
            # Not queued means not accepted: remove the record so no job is left waiting forever.
            await state.store.delete_jobs([job.job_id])
            raise
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
    responses={200: {"content": {"text/event-stream": {}}}, 404: NOT_FOUND},
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
    store = state.store
    block_ms = state.settings.sse_block_ms

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

    return EventSourceResponse(stream(), ping=int(state.settings.sse_ping_s))


def _valid_stream_id(value: str) -> bool:
    head, _, tail = value.partition("-")
    return head.isdigit() and (tail == "" or tail.isdigit())

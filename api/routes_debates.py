"""``/v1/debates``: submit one debate, read its status and result, stream its events, cancel it.

Each route is HTTP in, a call into ``api/submission.py`` (intake, idempotency, ownership, cancel) or
``api/streams.py`` (events), HTTP out.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse

from api.deps import Owner, State
from api.guards import StoredResponse
from api.problems import Problem
from api.schemas import Accepted, DebateRequest, JobView
from api.streams import SlottedEventSource, job_events, valid_stream_id
from api.submission import (
    admit_debate,
    cancel_owned_debate,
    fingerprint,
    idempotent,
    job_view,
    owned_job,
    submit_debate,
)
from services.jobstore import JobFull

router = APIRouter(prefix="/v1/debates", tags=["debates"])

NOT_FOUND = {"model": None, "description": "unknown id, or a job of another key (problem+json)"}


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
    config = admit_debate(state, body)

    async def handler() -> StoredResponse:
        job = await submit_debate(state, owner, body, config)
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
    return job_response(await cancel_owned_debate(state, owner, job_id))


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
    if not valid_stream_id(start):
        raise Problem(400, f"Last-Event-ID {start!r} is not an event id of this API")
    # The stream reads through the event streams' own Redis pool; a slot per stream caps them.
    slot = await state.streams.acquire(owner)
    events = job_events(
        state.event_store,
        job_id,
        start,
        block_ms=state.settings.sse_block_ms,
        disconnected=request.is_disconnected,
    )
    return SlottedEventSource(events, ping=int(state.settings.sse_ping_s), slots=state.streams, slot=slot)

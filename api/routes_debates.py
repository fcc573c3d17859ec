"""``/v1/debates``: submit one debate, read its status and result, stream its events, cancel it,
delete it.

Each route is HTTP in, a call into ``api/submission.py`` (intake, idempotency, ownership, cancel,
delete) or ``api/streams.py`` (events), HTTP out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse

from api.deps import IdempotencyKey, Owner, State
from api.openapi_doc import problem
from api.problems import STORE_UNAVAILABLE
from api.schemas import Accepted, DebateDeleted, DebateRequest, JobView
from api.streams import EVENT_ID_PATTERN, SlottedEventSource, sse_fields
from api.submission import (
    accept_debate,
    cancel_owned_debate,
    delete_owned_debate,
    job_view,
    open_events,
    owned_job,
)
from services.jobstore import JobFull

router = APIRouter(prefix="/v1/debates", tags=["debates"])
log = logging.getLogger("parley.api")

NOT_FOUND = problem("unknown id, or a job of another key", "/problems/not-found")
# What submitting can meet besides validation: the key's limits (active jobs, daily tokens, storage).
LIMITS = problem(
    "rate, active-job, daily token or storage limit (Retry-After)",
    "/problems/too-many-jobs",
    "/problems/quota-exceeded",
    "/problems/storage-limit",
)
STORAGE = problem(
    "request body over the size limit, or more than the key may store", "/problems/storage-limit"
)


@router.post(
    "",
    status_code=202,
    response_model=Accepted,
    responses={413: STORAGE, 429: LIMITS},
)
async def create_debate(
    body: DebateRequest,
    request: Request,
    state: State,
    owner: Owner,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    """Queue one debate; answers 202 with the job id and a ``Location`` to poll."""
    raw = await request.body()
    out = await accept_debate(state, owner, body, raw, idempotency_key, request.url.path)
    return JSONResponse(out.body, status_code=out.status, headers=out.headers)


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


CANCEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: NOT_FOUND,
    409: problem("the debate had already finished; nothing to cancel", "/problems/finished"),
}


@router.post("/{job_id}/cancel", response_model=JobView, response_class=Response, responses=CANCEL_RESPONSES)
async def cancel_debate(job_id: str, state: State, owner: Owner) -> Response:
    """Cancel a queued or running debate; a running worker notices within a second and stops.

    The debate stays readable (``GET /v1/debates/{id}`` answers it with status ``cancelled``) until
    it expires like any finished job.
    """
    return job_response(await cancel_owned_debate(state, owner, job_id))


@router.delete(
    "/{job_id}",
    response_model=DebateDeleted,
    responses={
        404: NOT_FOUND,
        409: problem(
            "the debate is an item of a batch: delete the batch, or cancel the item", "/problems/batch-item"
        ),
    },
)
async def delete_debate(job_id: str, state: State, owner: Owner) -> DebateDeleted:
    """Delete a debate for good: a queued or running one is cancelled first (its worker stops within a
    second), then its record, result and events are removed, so a later ``GET`` is 404.

    The tokens it used stay charged to the key. To stop a debate and keep its record, use
    ``POST /v1/debates/{job_id}/cancel``. An item of a batch goes with its batch
    (``DELETE /v1/batches/{batch_id}``).
    """
    return await delete_owned_debate(state, owner, job_id)


@router.get(
    "/{job_id}/events",
    responses={
        200: {"content": {"text/event-stream": {}}},
        404: NOT_FOUND,
        429: problem(
            "too many open event streams for this key or server (Retry-After)", "/problems/too-many-streams"
        ),
    },
    response_class=EventSourceResponse,
)
async def debate_events(
    job_id: str,
    request: Request,
    state: State,
    owner: Owner,
    last_event_id: Annotated[
        str | None,
        Header(pattern=EVENT_ID_PATTERN, description="resume after this event id (as the stream sent it)"),
    ] = None,
    after: Annotated[
        str | None,
        Query(pattern=EVENT_ID_PATTERN, description="resume after this event id (= Last-Event-ID)"),
    ] = None,
) -> EventSourceResponse:
    """Server-Sent Events of the job; reconnect with ``Last-Event-ID`` to resume without gaps.

    The stream ends after ``job.completed``, ``job.failed`` or ``job.cancelled``.
    """
    start = last_event_id or after or "0-0"
    slot, events = await open_events(state, owner, job_id, start, request.is_disconnected)
    fields = until_store_fails(sse_fields(events), state.settings.retry_after_s)
    return SlottedEventSource(fields, ping=int(state.settings.sse_ping_s), slots=state.streams, slot=slot)


def until_store_fails(
    fields: AsyncIterator[dict[str, str]], retry_after_s: int
) -> AsyncIterator[dict[str, Any]]:
    """The stream's fields until the job store becomes unreachable mid-stream; then a last field that
    tells the client to reconnect (``retry``, in ms: the 503's ``Retry-After``) and a clean end, so the
    client resumes with ``Last-Event-ID`` instead of meeting a broken response."""

    async def guarded() -> AsyncIterator[dict[str, Any]]:
        try:
            async for field in fields:
                yield field
        except STORE_UNAVAILABLE as exc:
            log.warning("event stream ended: the job store is unavailable: %s: %s", type(exc).__name__, exc)
            yield {
                "retry": retry_after_s * 1000,
                "comment": "the job store is unavailable; reconnect with Last-Event-ID",
            }

    return guarded()

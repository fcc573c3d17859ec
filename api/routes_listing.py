"""``GET /v1/debates`` and ``GET /v1/batches``: the caller's recent jobs and batches, newest first
(``api/listing.py``; pages by cursor, ``before`` = the previous page's ``next_before``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import Owner, State
from api.listing import BatchList, DebateList, recent_batches, recent_debates

router = APIRouter(tags=["listing"])

MAX_PAGE = 100

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"page size, 1..{MAX_PAGE}")]
Before = Annotated[
    str | None,
    Query(max_length=100, description="the last id of the previous page (its `next_before`)"),
]


@router.get("/v1/debates", response_model=DebateList, responses={422: {"description": "bad limit"}})
async def list_debates(state: State, owner: Owner, limit: Limit = 20, before: Before = None) -> DebateList:
    """The caller's recent debates (single and batch items), newest first."""
    return await recent_debates(state, owner, limit, before)


@router.get("/v1/batches", response_model=BatchList, responses={422: {"description": "bad limit"}})
async def list_batches(state: State, owner: Owner, limit: Limit = 20, before: Before = None) -> BatchList:
    """The caller's recent batches with their counts per status, newest first."""
    return await recent_batches(state, owner, limit, before)

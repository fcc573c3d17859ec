"""``/v1/batches``: many questions with one config, accepted whole or not at all, results in order.

Each route is HTTP in, a call into the batch service modules, HTTP out: intake (parsing, limits,
validation, queueing) is ``api/batch_intake.py``; reading and cancelling a batch is ``api/batches.py``;
idempotency is ``api/submission.py``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import UploadFile

from api.batch_intake import accept_batch, batch_from_json, batch_from_upload, invalid, items_from_jsonl
from api.batches import batch_view, cancel_owned_batch, owned_results
from api.deps import ApiState, IdempotencyKey, Owner, State
from api.openapi_doc import FRAMEWORK, problem
from api.problems import Problem
from api.schemas import BatchAccepted, BatchItem, BatchView
from engine.config import DebateConfig

router = APIRouter(prefix="/v1/batches", tags=["batches"])
NOT_FOUND = problem("unknown id, or a batch of another key", "/problems/not-found")
FILE_PART_TYPES = "application/x-ndjson, application/jsonl, text/plain, application/octet-stream"


def _item_schema() -> dict[str, Any]:
    """BatchItem's JSON schema, its references pointing into the document's components (the models
    it uses are there already, through DebateRequest)."""
    schema = BatchItem.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                # What read_batch accepts: no other fields, at least one item, each a BatchItem.
                "schema": {
                    "type": "object",
                    "required": ["items"],
                    "additionalProperties": False,
                    "properties": {
                        "items": {"type": "array", "minItems": 1, "items": _item_schema()},
                        "config": {"$ref": "#/components/schemas/DebateConfig"},
                    },
                }
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    # What read_batch reads: a part of any other name is refused (400), not ignored.
                    "additionalProperties": False,
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "JSON lines, one `BatchItem` a line (blank lines skipped)",
                        },
                        "config": {"$ref": "#/components/schemas/DebateConfig"},
                    },
                },
                "encoding": {
                    # The file part's label is not checked; these are the types a JSONL upload goes by
                    # (octet-stream: what curl -F and httpx send for a .jsonl file).
                    "file": {"contentType": FILE_PART_TYPES},
                    "config": {"contentType": "application/json"},
                },
            },
        },
    }
}


async def read_batch(request: Request, state: ApiState) -> tuple[list[BatchItem], DebateConfig]:
    """Items and config from a JSON body, a JSONL body or a multipart JSONL upload."""
    s = state.settings
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=4, max_part_size=s.max_batch_bytes)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid("multipart upload needs a 'file' part with JSONL items")
        raw_cfg = form.get("config")
        return await batch_from_upload(await upload.read(), raw_cfg if isinstance(raw_cfg, str) else "", s)
    if ctype in ("application/json", ""):
        return await batch_from_json(await request.body(), s)
    if ctype in ("application/x-ndjson", "application/jsonl"):
        return await items_from_jsonl(await request.body(), s), DebateConfig()
    raise Problem(415, f"unsupported content type {ctype!r}; use application/json or multipart/form-data")


@router.post(
    "",
    status_code=202,
    response_model=BatchAccepted,
    openapi_extra=_BODY_DOC,
    responses={
        400: problem(
            "a body that is not JSON, nests too deep, or a multipart body that cannot be read", FRAMEWORK
        ),
        413: problem(
            "request body over the size limit, or more than the key may store", "/problems/storage-limit"
        ),
        415: problem("a body that is not JSON, JSONL or multipart", FRAMEWORK),
        422: problem("invalid items (nothing queued)", "/problems/invalid-batch"),
        429: problem(
            "rate, active-job, daily token or storage limit (Retry-After)",
            "/problems/too-many-jobs",
            "/problems/quota-exceeded",
            "/problems/storage-limit",
        ),
    },
)
async def create_batch(
    request: Request,
    state: State,
    owner: Owner,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    """Queue a batch: a JSON ``items`` list or a JSONL upload (``file``) plus one ``config``.

    Limits: ``PARLEY_API_MAX_BATCH_ITEMS`` items (10,000), ``PARLEY_API_MAX_LINE_BYTES`` per JSONL line
    (16 KiB), ``PARLEY_API_MAX_BATCH_BYTES`` per body (32 MiB). Invalid input queues nothing.
    """
    await request.body()  # read first: Starlette then parses the form from this buffer
    items, config = await read_batch(request, state)
    out = await accept_batch(state, owner, items, config, idempotency_key, request.url.path)
    return JSONResponse(out.body, status_code=out.status, headers=out.headers)


@router.get("/{batch_id}", response_model=BatchView, responses={404: NOT_FOUND})
async def get_batch(batch_id: str, state: State, owner: Owner) -> BatchView:
    """Counts per status and the share of items finished."""
    return await batch_view(state, owner, batch_id)


@router.get(
    "/{batch_id}/results",
    responses={200: {"content": {"application/x-ndjson": {}}}, 404: NOT_FOUND},
    response_class=StreamingResponse,
)
async def batch_results(batch_id: str, state: State, owner: Owner) -> StreamingResponse:
    """One JSON line per item, input order: ``{id, index, job_id, status, question, answers, result, error}``.

    Unfinished items appear with their current status and ``result: null``; fetch again when the
    batch status is ``completed``.
    """
    lines = await owned_results(state, owner, batch_id)
    return StreamingResponse(lines, media_type="application/x-ndjson")


@router.post("/{batch_id}/cancel", response_model=BatchView, responses={404: NOT_FOUND})
async def cancel_batch(batch_id: str, state: State, owner: Owner) -> BatchView:
    """Cancel every unfinished item of the batch; finished items keep their results.

    The batch and its items stay readable (cancelled items with status ``cancelled``) until they
    expire like any finished job.
    """
    return await cancel_owned_batch(state, owner, batch_id)


@router.delete(
    "/{batch_id}",
    response_model=BatchView,
    responses={404: NOT_FOUND},
    deprecated=True,
    summary="Cancel Batch (alias of POST /v1/batches/{batch_id}/cancel)",
)
async def cancel_batch_alias(batch_id: str, state: State, owner: Owner) -> BatchView:
    """Kept for clients written before ``POST /v1/batches/{batch_id}/cancel``, which it is the same as:
    it cancels the unfinished items, it deletes nothing. The batch stays readable."""
    return await cancel_owned_batch(state, owner, batch_id)

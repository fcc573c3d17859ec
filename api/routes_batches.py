"""``/v1/batches``: many questions with one config, accepted whole or not at all, results in order.

Each route is HTTP in, a call into the batch service modules, HTTP out: intake (parsing, limits,
validation, queueing) is ``api/batch_intake.py``; reading, cancelling and deleting a batch is
``api/batches.py``; idempotency is ``api/submission.py``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import FormData, UploadFile

from api.batch_intake import accept_batch, batch_from_json, batch_from_upload, invalid, items_from_jsonl
from api.batches import batch_view, cancel_owned_batch, delete_owned_batch, owned_results
from api.deps import ApiState, IdempotencyKey, Owner, State
from api.openapi_doc import FRAMEWORK, problem
from api.problems import Problem
from api.schemas import BatchAccepted, BatchDeleted, BatchItem, BatchView
from engine.config import DebateConfig

router = APIRouter(prefix="/v1/batches", tags=["batches"])
NOT_FOUND = problem("unknown id, or a batch of another key", "/problems/not-found")
# The media types of the multipart `file` part: JSON lines, as text. Its label is not checked (curl -F
# and httpx send a .jsonl file as application/octet-stream, and that works too); what is checked is
# that it is text of JSON lines, so bytes that are not (an image, random binary) are refused with 422.
FILE_PART_TYPES = "application/jsonl, application/x-ndjson, text/plain"


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
                    # What read_batch reads: a part of any other name is refused (422), not ignored.
                    "additionalProperties": False,
                    "properties": {
                        "file": {
                            # Text, not `format: binary`: JSON lines are UTF-8 text, and bytes that
                            # are not text are no valid file part.
                            "type": "string",
                            "description": "JSON lines (UTF-8 text), one `BatchItem` a line (blank lines "
                            "skipped); sent as a file or as a plain form field",
                        },
                        "config": {"$ref": "#/components/schemas/DebateConfig"},
                    },
                },
                "encoding": {
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
        form = await request.form(max_files=2, max_fields=4, max_part_size=s.max_batch_bytes)
        data, raw_cfg = await _form_parts(form)
        return await batch_from_upload(data, raw_cfg, s)
    if ctype in ("application/json", ""):
        return await batch_from_json(await request.body(), s)
    if ctype in ("application/x-ndjson", "application/jsonl"):
        return await items_from_jsonl(await request.body(), s), DebateConfig()
    raise Problem(415, f"unsupported content type {ctype!r}; use application/json or multipart/form-data")


async def _form_parts(form: FormData) -> tuple[bytes, str]:
    """The JSON lines of a multipart upload's ``file`` part and the text of its ``config`` part ("" when
    absent). Each may come as a file (with a filename) or as a plain field; a part of any other name,
    or a repeated one, is refused, as the document's ``additionalProperties: false`` says."""
    names = [name for name, _ in form.multi_items()]
    unknown = sorted(set(names) - {"file", "config"})
    if unknown:
        raise invalid(f"multipart upload has parts {unknown}; only 'file' (JSON lines) and 'config' are read")
    if names.count("file") != 1 or names.count("config") > 1:
        raise invalid("multipart upload needs one 'file' part with JSONL items and at most one 'config' part")

    async def text(part: UploadFile | str) -> bytes:
        return await part.read() if isinstance(part, UploadFile) else part.encode()

    file_part = form["file"]
    config_part = form.get("config")
    raw_cfg = "" if config_part is None else (await text(config_part)).decode("utf-8", "replace")
    return await text(file_part), raw_cfg


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


@router.delete("/{batch_id}", response_model=BatchDeleted, responses={404: NOT_FOUND})
async def delete_batch(batch_id: str, state: State, owner: Owner) -> BatchDeleted:
    """Delete a batch and its items for good: unfinished items are cancelled first (their workers
    stop), then the batch, every item's record and its results are removed, so later reads are 404.

    The tokens its items used stay charged to the key. To stop a batch and keep its results, use
    ``POST /v1/batches/{batch_id}/cancel``.
    """
    return await delete_owned_batch(state, owner, batch_id)

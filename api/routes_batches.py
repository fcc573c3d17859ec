"""``/v1/batches``: many questions with one config, accepted whole or not at all, results in order.

Intake is counted before it is built: the body's values and depth are measured on its bytes, and
items are decoded one at a time, so an oversized batch is refused after ``max_items + 1`` items (see
``api/jsonlimits.py``). Intake is all-or-nothing: every line is parsed and validated before anything
is stored; the jobs and the batch are stored in one Redis transaction; if queueing then fails,
everything is removed again and the client gets a 503. Results stream as JSONL in input order straight
from the job store, a chunk of jobs at a time, so a 10,000-item batch never sits in memory as one
document.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from api.admission import admit_config, admit_pool
from api.deps import ApiState, Owner, State
from api.guards import StoredResponse
from api.jsonlimits import (
    BatchDocument,
    NotABatch,
    TooManyItems,
    count_values,
    iter_lines,
    json_shape,
    parse_batch_json,
    too_deep,
)
from api.problems import Problem
from api.schemas import BatchAccepted, BatchItem, BatchView
from api.settings import ApiSettings
from api.submission import fingerprint, idempotent, submit_jobs
from engine.config import DebateConfig
from services.jobstore import ACTIVE, TERMINAL, BatchRecord, JobRecord, new_id
from services.task_queue import QUEUE_BATCH

router = APIRouter(prefix="/v1/batches", tags=["batches"])

MAX_REPORTED_ERRORS = 20


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
                        "file": {"type": "string", "format": "binary", "description": "JSONL items"},
                        "config": {"$ref": "#/components/schemas/DebateConfig"},
                    },
                },
                "encoding": {"config": {"contentType": "application/json"}},
            },
        },
    }
}


def _invalid(detail: str, errors: list[dict[str, Any]] | None = None) -> Problem:
    return Problem(
        422, detail, type_="/problems/invalid-batch", extra={"errors": errors} if errors is not None else None
    )


def _parse_config(raw: Any) -> DebateConfig:
    try:
        return DebateConfig.model_validate(raw or {})
    except ValidationError as exc:
        errs = [{"loc": ["config", *e["loc"]], "msg": e["msg"]} for e in exc.errors()]
        raise _invalid(f"config: {errs[0]['msg']}", errs) from exc


def _validate_items(raw_items: list[tuple[int, Any]], max_items: int) -> list[BatchItem]:
    """Validate every item (line numbers in errors); raises with up to 20 errors, stores nothing."""
    if not raw_items:
        raise _invalid("the batch has no items")
    if len(raw_items) > max_items:
        raise _invalid(f"the batch has {len(raw_items)} items; the limit is {max_items}")
    items: list[BatchItem] = []
    errors: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, raw in raw_items:
        try:
            item = BatchItem.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            errors.append({"line": line, "msg": f"{loc + ': ' if loc else ''}{first['msg']}"})
        else:
            if item.id is not None:
                if item.id in seen:
                    errors.append(
                        {"line": line, "msg": f"duplicate id {item.id!r} (first on {seen[item.id]})"}
                    )
                seen[item.id] = line
            items.append(item)
        if len(errors) >= MAX_REPORTED_ERRORS:
            break
    if errors:
        raise _invalid(f"{len(errors)}+ invalid items; nothing was queued", errors)
    return items


def _too_many(max_items: int) -> Problem:
    return _invalid(f"the batch has more than {max_items} items; the limit is {max_items}")


def _too_many_values(settings: ApiSettings) -> Problem:
    return _invalid(
        f"the batch body holds more than {settings.max_batch_values} JSON values, its limit "
        f"(a batch is at most {settings.max_batch_items} items)"
    )


def _too_deep(where: str, limit: int) -> Problem:
    return Problem(400, f"{where} nests deeper than {limit} levels", type_="/problems/too-deep")


def _parse_jsonl(data: bytes, settings: ApiSettings) -> list[tuple[int, Any]]:
    """Decode JSONL lines one at a time, refusing at the first line over the item limit, so a body of
    millions of tiny lines costs ``max_items + 1`` decoded lines, not millions."""
    max_line, max_items = settings.max_line_bytes, settings.max_batch_items
    out: list[tuple[int, Any]] = []
    errors: list[dict[str, Any]] = []
    values = 0
    for n, line in iter_lines(data):
        if not line.strip():
            continue
        if len(line) > max_line:
            errors.append({"line": n, "msg": f"line is {len(line)} bytes; the limit is {max_line}"})
        elif too_deep(line, settings.max_json_depth):
            raise _too_deep(f"line {n}", settings.max_json_depth)
        else:
            values += count_values(line)
            if values > settings.max_batch_values:
                raise _too_many_values(settings)
            try:
                out.append((n, json.loads(line)))
            except ValueError as exc:
                errors.append({"line": n, "msg": f"not JSON: {exc}"})
        if len(errors) >= MAX_REPORTED_ERRORS:
            break
        if len(out) > max_items:
            raise _too_many(max_items)
    if errors:
        raise _invalid(f"{len(errors)}+ unreadable lines; nothing was queued", errors)
    return out


def _parse_json_body(data: bytes, settings: ApiSettings) -> BatchDocument:
    """The JSON body's items and config; the body's value count is checked before anything is built
    (the body-depth middleware has already checked its nesting)."""
    rough = data.count(b",") + data.count(b"[") + data.count(b"{")
    if rough > settings.max_batch_values and json_shape(data).values > settings.max_batch_values:
        raise _too_many_values(settings)
    try:
        text = data.decode(json.detect_encoding(data))
        return parse_batch_json(
            text, max_items=settings.max_batch_items, max_config_chars=settings.max_body_bytes
        )
    except TooManyItems:
        raise _too_many(settings.max_batch_items) from None
    except NotABatch as exc:
        raise _invalid(str(exc)) from None
    except ValueError as exc:
        raise Problem(400, f"body is not JSON: {exc}", type_="/problems/malformed-json") from exc


T = TypeVar("T")


async def off_loop(parse: Callable[[bytes, ApiSettings], T], data: bytes, settings: ApiSettings) -> T:
    """Parse a large body in a worker thread: the event loop keeps serving other requests and streams
    meanwhile (small bodies are parsed in place, where a thread would cost more than it saves)."""
    if len(data) <= settings.max_body_bytes:
        return parse(data, settings)
    return await anyio.to_thread.run_sync(parse, data, settings)


async def read_batch(request: Request, state: ApiState) -> tuple[list[BatchItem], DebateConfig]:
    """Items and config from a JSON body or a multipart JSONL upload."""
    s = state.settings
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=4, max_part_size=s.max_batch_bytes)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise _invalid("multipart upload needs a 'file' part with JSONL items")
        raw_items = await off_loop(_parse_jsonl, await upload.read(), s)
        raw_cfg = form.get("config")
        cfg: Any = {}
        if isinstance(raw_cfg, str) and raw_cfg.strip():
            if too_deep(raw_cfg, s.max_json_depth):
                raise _too_deep("config", s.max_json_depth)
            try:
                cfg = json.loads(raw_cfg)
            except ValueError as exc:
                raise Problem(400, f"config is not JSON: {exc}", type_="/problems/malformed-json") from exc
        return _validate_items(raw_items, s.max_batch_items), _parse_config(cfg)
    if ctype in ("application/json", ""):
        doc = await off_loop(_parse_json_body, await request.body(), s)
        config = _parse_config(doc.config)
        return _validate_items(list(enumerate(doc.items, start=1)), s.max_batch_items), config
    if ctype in ("application/x-ndjson", "application/jsonl"):
        raw_items = await off_loop(_parse_jsonl, await request.body(), s)
        return _validate_items(raw_items, s.max_batch_items), DebateConfig()
    raise Problem(415, f"unsupported content type {ctype!r}; use application/json or multipart/form-data")


@router.post(
    "",
    status_code=202,
    response_model=BatchAccepted,
    openapi_extra=_BODY_DOC,
    responses={
        415: {"description": "a body that is not JSON, JSONL or multipart"},
        422: {"description": "invalid items (nothing queued)"},
        429: {},
        503: {},
    },
)
async def create_batch(
    request: Request,
    state: State,
    owner: Owner,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Queue a batch: a JSON ``items`` list or a JSONL upload (``file``) plus one ``config``.

    Limits: ``PARLEY_API_MAX_BATCH_ITEMS`` items (10,000), ``PARLEY_API_MAX_LINE_BYTES`` per JSONL line
    (16 KiB), ``PARLEY_API_MAX_BATCH_BYTES`` per body (32 MiB). Invalid input queues nothing.
    """
    await request.body()  # read first: Starlette then parses the form from this buffer
    items, config = await read_batch(request, state)
    if config.requires_gold:
        # truth_last orders views by the gold answer (evaluation only): every item must carry one.
        missing = [i + 1 for i, item in enumerate(items) if not item.answers]
        if missing:
            raise _invalid(
                f"config.ordering: 'truth_last' needs 'answers' on every item (missing at {missing[:10]})"
            )

    config = admit_config(config, state.settings)
    for i, item in enumerate(items):
        admit_pool(config, item.pool, field=f"items.{i}.pool")

    async def handler() -> StoredResponse:
        batch_id = new_id("bat")
        cfg = config.model_dump(mode="json")
        jobs = [
            JobRecord(
                job_id=new_id("job"),
                owner=owner,
                question=item.question,
                answers=item.answers,
                config=cfg,
                pool=[p.model_dump(mode="json") for p in item.pool] if item.pool is not None else None,
                queue=QUEUE_BATCH,
                batch_id=batch_id,
                index=i,
                item_id=item.id if item.id is not None else str(i),
                rounds=config.rounds,
            )
            for i, item in enumerate(items)
        ]
        batch = BatchRecord(batch_id=batch_id, owner=owner, total=len(jobs), config=cfg)
        await submit_jobs(state, owner, jobs, QUEUE_BATCH, batch)
        location = f"/v1/batches/{batch_id}"
        accepted = BatchAccepted(batch_id=batch_id, status="queued", total=len(jobs), location=location)
        return StoredResponse(202, accepted.model_dump(), {"Location": location})

    return await idempotent(
        state,
        owner,
        idempotency_key,
        # Of the parsed batch, not the raw body: a multipart upload's boundary changes on every retry.
        fingerprint(canonical(items, config), request.url.path),
        handler,
    )


def canonical(items: list[BatchItem], config: DebateConfig) -> bytes:
    """One byte string per distinct batch, whatever its encoding (JSON, JSONL upload)."""
    doc = {"items": [i.model_dump() for i in items], "config": config.model_dump(mode="json")}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


async def owned_batch(state: ApiState, owner: str, batch_id: str) -> BatchRecord:
    batch = await state.store.get_batch(batch_id)
    if batch is None or batch.owner != owner:
        raise Problem(404, f"no batch {batch_id!r}", type_="/problems/not-found")
    return batch


def batch_status(counts: dict[str, int], total: int) -> str:
    finished = sum(counts[s] for s in TERMINAL)
    if finished >= total:
        return "completed"
    if counts["queued"] == total:
        return "queued"
    return "running"


@router.get("/{batch_id}", response_model=BatchView, responses={404: {}})
async def get_batch(batch_id: str, state: State, owner: Owner) -> BatchView:
    """Counts per status and the share of items finished."""
    batch = await owned_batch(state, owner, batch_id)
    counts = await state.store.batch_counts(batch_id)
    finished = sum(counts[s] for s in TERMINAL)
    return BatchView(
        batch_id=batch_id,
        status=batch_status(counts, batch.total),
        total=batch.total,
        counts=counts,
        progress=round(finished / batch.total, 4) if batch.total else 1.0,
        created_at=batch.created_at,
        config=batch.config,
    )


@router.get(
    "/{batch_id}/results",
    responses={200: {"content": {"application/x-ndjson": {}}}, 404: {}},
    response_class=StreamingResponse,
)
async def batch_results(batch_id: str, state: State, owner: Owner) -> StreamingResponse:
    """One JSON line per item, input order: ``{id, index, job_id, status, question, answers, result, error}``.

    Unfinished items appear with their current status and ``result: null``; fetch again when the
    batch status is ``completed``.
    """
    await owned_batch(state, owner, batch_id)
    store = state.store

    async def lines() -> AsyncIterator[bytes]:
        index = 0
        async for job_id, found in store.iter_batch_jobs(batch_id, with_result=True):
            result_json = None
            if found is None:
                row: dict[str, Any] = {
                    "id": None,
                    "index": index,
                    "job_id": job_id,
                    "status": "failed",
                    "question": None,
                    "answers": None,
                    "error": "job record expired",
                }
            else:
                job = found.job
                result_json = found.result_json
                row = {
                    "id": job.item_id,
                    "index": job.index if job.index is not None else index,
                    "job_id": job_id,
                    "status": job.status,
                    "question": job.question,
                    "answers": job.answers,
                    "error": job.error,
                }
            index += 1
            # The stored result JSON goes out as is (see JobFull): no parse, no re-serialisation.
            head = json.dumps(row, ensure_ascii=False)
            yield f'{head[:-1]}, "result": {result_json or "null"}}}\n'.encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.delete("/{batch_id}", response_model=BatchView, responses={404: {}})
async def cancel_batch(batch_id: str, state: State, owner: Owner) -> BatchView:
    """Cancel every unfinished item of the batch; finished items keep their results."""
    await owned_batch(state, owner, batch_id)
    async for job_id, found in state.store.iter_batch_jobs(batch_id):
        if found is not None and found.job.status in ACTIVE:
            await state.store.transition(
                job_id, "cancelled", ACTIVE, event="job.cancelled", data={"reason": "batch cancelled"}
            )
    return await get_batch(batch_id, state, owner)

"""Batch intake: the body's items and config parsed, counted and validated before anything is stored,
then the jobs and the batch built and queued in one step (the service layer under ``POST /v1/batches``).

Intake is counted before it is built: the body's values and depth are measured on its bytes, and
items are decoded one at a time, so an oversized batch is refused after ``max_items + 1`` items (see
``api/jsonlimits.py``). Intake is all-or-nothing: every line is parsed and validated before anything
is stored; the jobs and the batch are stored in one Redis transaction (``submit_jobs``); if queueing
then fails, everything is removed again and the client gets a 503. Errors are ``Problem``s; this
module reads no request and builds no response.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from pydantic import ValidationError

from api.admission import admit_config, admit_pool
from api.deps import ApiState
from api.errors import InvalidBatch, MalformedJson, TooDeep
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
from api.schemas import BatchAccepted, BatchItem, as_json_types
from api.settings import ApiSettings
from api.submission import fingerprint, idempotent, submit_jobs
from engine.config import DebateConfig
from services.jobstore import BatchRecord, JobRecord, new_id
from services.task_queue import QUEUE_BATCH

MAX_REPORTED_ERRORS = 20


def invalid(detail: str, errors: list[dict[str, Any]] | None = None) -> InvalidBatch:
    return InvalidBatch(detail, errors=errors)


def _parse_config(raw: Any) -> DebateConfig:
    try:
        return DebateConfig.model_validate(as_json_types(raw), strict=True)
    except ValidationError as exc:
        errs = [{"loc": ["config", *e["loc"]], "msg": e["msg"]} for e in exc.errors()]
        raise invalid(f"config: {errs[0]['msg']}", errs) from exc


def _validate_items(raw_items: list[tuple[int, Any]], max_items: int) -> list[BatchItem]:
    """Validate every item (line numbers in errors); raises with up to 20 errors, stores nothing."""
    if not raw_items:
        raise invalid("the batch has no items")
    if len(raw_items) > max_items:
        raise invalid(f"the batch has {len(raw_items)} items; the limit is {max_items}")
    items: list[BatchItem] = []
    errors: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, raw in raw_items:
        try:
            item = BatchItem.model_validate(as_json_types(raw), strict=True)
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
        raise invalid(f"{len(errors)}+ invalid items; nothing was queued", errors)
    return items


def _too_many(max_items: int) -> InvalidBatch:
    return invalid(f"the batch has more than {max_items} items; the limit is {max_items}")


def _too_many_values(settings: ApiSettings) -> InvalidBatch:
    return invalid(
        f"the batch body holds more than {settings.max_batch_values} JSON values, its limit "
        f"(a batch is at most {settings.max_batch_items} items)"
    )


def _too_deep(where: str, limit: int) -> TooDeep:
    return TooDeep(f"{where} nests deeper than {limit} levels")


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
        raise invalid(f"{len(errors)}+ unreadable lines; nothing was queued", errors)
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
        raise invalid(str(exc)) from None
    except ValueError as exc:
        raise MalformedJson(f"body is not JSON: {exc}") from exc


T = TypeVar("T")


async def off_loop(parse: Callable[[bytes, ApiSettings], T], data: bytes, settings: ApiSettings) -> T:
    """Parse a large body in a worker thread: the event loop keeps serving other requests and streams
    meanwhile (small bodies are parsed in place, where a thread would cost more than it saves)."""
    if len(data) <= settings.max_body_bytes:
        return parse(data, settings)
    return await anyio.to_thread.run_sync(parse, data, settings)


def _config_json(raw: str, settings: ApiSettings) -> Any:
    """A multipart upload's ``config`` part as JSON (blank means the defaults)."""
    if not raw.strip():
        return {}
    if too_deep(raw, settings.max_json_depth):
        raise _too_deep("config", settings.max_json_depth)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise MalformedJson(f"config is not JSON: {exc}") from exc


async def batch_from_upload(
    data: bytes, raw_config: str, settings: ApiSettings
) -> tuple[list[BatchItem], DebateConfig]:
    """Validated items and config of a multipart upload (a JSONL ``file`` and a JSON ``config`` part)."""
    raw_items = await off_loop(_parse_jsonl, data, settings)
    cfg = _config_json(raw_config, settings)
    return _validate_items(raw_items, settings.max_batch_items), _parse_config(cfg)


async def items_from_jsonl(data: bytes, settings: ApiSettings) -> list[BatchItem]:
    """Validated items of a JSONL body (the config is the default one)."""
    raw_items = await off_loop(_parse_jsonl, data, settings)
    return _validate_items(raw_items, settings.max_batch_items)


async def batch_from_json(data: bytes, settings: ApiSettings) -> tuple[list[BatchItem], DebateConfig]:
    """Validated items and config of a JSON body (``{"items": [...], "config": {...}}``)."""
    doc = await off_loop(_parse_json_body, data, settings)
    config = _parse_config(doc.config)
    return _validate_items(list(enumerate(doc.items, start=1)), settings.max_batch_items), config


def admit_batch(items: list[BatchItem], config: DebateConfig, settings: ApiSettings) -> DebateConfig:
    """The operator's limits on the config and on every item's given pool; gold answers where the
    config orders views by them (``truth_last``, evaluation only)."""
    if config.requires_gold:
        missing = [i + 1 for i, item in enumerate(items) if not item.answers]
        if missing:
            raise invalid(
                f"config.ordering: 'truth_last' needs 'answers' on every item (missing at {missing[:10]})"
            )
    config = admit_config(config, settings)
    for i, item in enumerate(items):
        admit_pool(config, item.pool, field=f"items.{i}.pool")
    return config


async def submit_batch(
    state: ApiState, owner: str, items: list[BatchItem], config: DebateConfig
) -> BatchAccepted:
    """Store the batch and its jobs and queue them on the batch queue (all or nothing)."""
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
    return BatchAccepted(batch_id=batch_id, status="queued", total=len(jobs), location=location)


async def accept_batch(
    state: ApiState,
    owner: str,
    items: list[BatchItem],
    config: DebateConfig,
    idempotency_key: str | None,
    path: str,
) -> StoredResponse:
    """``POST /v1/batches`` after its body was read: the operator's limits, then the batch queued once
    per ``Idempotency-Key`` (a repeat gets the first answer)."""
    config = admit_batch(items, config, state.settings)

    async def handler() -> StoredResponse:
        accepted = await submit_batch(state, owner, items, config)
        return StoredResponse(202, accepted.model_dump(), {"Location": accepted.location})

    return await idempotent(
        state, owner, idempotency_key, fingerprint(canonical(items, config), path), handler
    )


def canonical(items: list[BatchItem], config: DebateConfig) -> bytes:
    """One byte string per distinct batch, whatever its encoding (JSON, JSONL upload): the idempotency
    fingerprint of the parsed batch, since a multipart upload's boundary changes on every retry."""
    doc = {"items": [i.model_dump() for i in items], "config": config.model_dump(mode="json")}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

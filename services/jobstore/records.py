"""What the job store keeps: job and batch records, job states, usage, events and their sizes.

Storage per key: every write the store makes for an owner (job records, events, results,
checkpoints, batches, the gateway's idempotency records) adds its size to the owner's counter of the
day it was written. Everything written expires at most ``ttl_s`` after its last write, so the sum of
the counters of the last ``ttl_s`` + one day bounds, from above, what the owner keeps in Redis: an
over-estimate (rewrites count twice), never an under-estimate, read with one MGET.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

# The status names and the usage document are the API's too: one definition for the store, the
# gateway and the Python client.
from parley_wire.models import JobStatus

# A stream per job stays small (a debate emits tens of events); the cap guards against a runaway loop.
EVENTS_MAXLEN = 10_000
# Per-record overhead counted on top of the bytes of keys and values (Redis' own structures).
RECORD_OVERHEAD = 200
# What Redis holds for one stored job beyond its fields' bytes: the hash's own structures, the event
# stream, the index entries and its queue message. Measured: 8.6 KB of used_memory per job of a
# 1,000-item batch with short questions (the fields themselves ~2.6 KB of it), so this is above it.
JOB_OVERHEAD_BYTES = 8192
DAY_S = 86400
# A finished job's event stream is packed into its record (``events_z``) and the stream itself lives
# this much longer, so a reader that looked at the stream a moment before it went still finds it.
EVENTS_GRACE_S = 60
# The per-owner listing indexes keep this many newest ids: enough for a page of recent work (one
# 10,000-item batch fits), bounded so an index never grows with a key's whole history.
OWNER_INDEX_MAX = 20_000


class JobRecord(BaseModel):
    """One debate job as stored; ``result`` is loaded separately because it carries the transcript."""

    job_id: str
    owner: str
    status: JobStatus = "queued"
    question: str
    answers: list[str] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    queue: str = ""
    batch_id: str | None = None
    index: int | None = None
    item_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    round: int = 0
    rounds: int = 0
    error: str | None = None
    worker: str | None = None
    # Daily token quota: the tokens this job reserved on its owner's ``usage_day`` at submission and
    # still holds; each LLM call's charges are drawn from it (and what a call did not use goes back),
    # so a running job holds exactly this much of the quota; the rest is released when the job
    # reaches a terminal status.
    reserved_tokens: int = 0
    usage_day: str | None = None
    # A knowledge pool the client brought (items as given); None = the retriever builds one.
    pool: list[dict[str, Any]] | None = None


def usage_day(at: float | None = None) -> str:
    """The UTC day a job's tokens are charged to (the day it was submitted)."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if at is None else at))


class BatchRecord(BaseModel):
    batch_id: str
    owner: str
    total: int
    created_at: float = 0.0
    config: dict[str, Any] = Field(default_factory=dict)


class Event(BaseModel):
    id: str
    type: str
    data: dict[str, Any]


def storage_key(prefix: str, owner: str, at: float | None = None) -> str:
    """The counter of the bytes ``owner`` wrote on the UTC day of ``at`` (now by default)."""
    day = int((time.time() if at is None else at) // DAY_S)
    return f"{prefix}:bytes:{owner}:{day}"


def stored_size(jobs: Sequence[JobRecord], batch: BatchRecord | None = None) -> int:
    """What storing ``jobs`` (and ``batch``) writes: the bytes of their fields, ids and first event."""
    total = 0
    for job in jobs:
        fields = job.model_dump(exclude_none=True)
        total += sum(len(k) + len(dump_field(v).encode()) for k, v in fields.items())
        total += JOB_OVERHEAD_BYTES
    if batch is not None:
        total += len(dump_field(batch.config).encode()) + RECORD_OVERHEAD
    return total


# The fields of a job record that no write after its submission changes: what its removal can take
# off the owner's storage counter of the day it was stored (``stored_size`` counted them there).
_SUBMITTED_FIELDS = (
    "job_id",
    "owner",
    "question",
    "answers",
    "config",
    "queue",
    "batch_id",
    "index",
    "item_id",
)


def removed_size(raw: dict[str, str]) -> tuple[int, int]:
    """What removing a stored job frees of its owner's storage counters, as (bytes counted the day it
    was stored, bytes of its result counted the day it finished).

    Only bytes known to have been counted there: the fields set at submission and the job's share of
    overhead, and the packed result its completion wrote. Everything else it wrote (events, progress,
    checkpoints) stays counted until those counters expire, so the counters remain an upper bound.
    """
    stored = JOB_OVERHEAD_BYTES + sum(len(k) + len(raw[k].encode()) for k in _SUBMITTED_FIELDS if raw.get(k))
    result = raw.get("result_z")
    return stored, len("result_z") + len(result.encode()) if result else 0


def draining_key(prefix: str, node: str) -> str:
    """Set while Celery node ``node`` shuts down: its running jobs hand themselves back to the queue."""
    return f"{prefix}:draining:{node}"


def new_id(kind: str) -> str:
    """Opaque, unguessable ids (``job_…``/``bat_…``); guessing another key's id must not be practical."""
    return f"{kind}_{uuid.uuid4().hex}"


def dump_field(value: Any) -> str:
    """A field as the job hash stores it (strings as is, numbers by repr, the rest as JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


class JobFull:
    """A job record with its result as stored (JSON text; ``None`` until completed).

    The API splices ``result_json`` into responses as is: parsing and re-serialising a transcript on
    every poll would cost more than everything else a ``GET`` does.
    """

    __slots__ = ("job", "result_json")

    def __init__(self, job: JobRecord, result_json: str | None) -> None:
        self.job = job
        self.result_json = result_json

    @property
    def result(self) -> dict[str, Any] | None:
        return json.loads(self.result_json) if self.result_json else None


def parse_job(raw: dict[str, str]) -> JobRecord:
    def opt_float(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if v else None

    def opt_int(key: str) -> int | None:
        v = raw.get(key)
        return int(v) if v else None

    return JobRecord(
        job_id=raw["job_id"],
        owner=raw["owner"],
        status=raw["status"],
        question=raw.get("question", ""),
        answers=json.loads(raw["answers"]) if raw.get("answers") else None,
        config=json.loads(raw["config"]) if raw.get("config") else {},
        queue=raw.get("queue", ""),
        batch_id=raw.get("batch_id") or None,
        index=opt_int("index"),
        item_id=raw.get("item_id") or None,
        created_at=float(raw.get("created_at") or 0),
        updated_at=float(raw.get("updated_at") or 0),
        started_at=opt_float("started_at"),
        finished_at=opt_float("finished_at"),
        attempts=int(raw.get("attempts") or 0),
        round=int(raw.get("round") or 0),
        rounds=int(raw.get("rounds") or 0),
        error=raw.get("error") or None,
        worker=raw.get("worker") or None,
        reserved_tokens=int(raw.get("reserved_tokens") or 0),
        usage_day=raw.get("usage_day") or None,
        pool=json.loads(raw["pool"]) if raw.get("pool") else None,
    )


# -- what a finished job keeps, packed -----------------------------------------------------------------
# A finished job's result (its transcript: prompts and replies, very repetitive) and its event stream
# are stored zlib-compressed. The store's clients decode replies as text, so the bytes travel as
# base64: a third more than the compressed bytes, still 3 to 7 times less than the JSON.
def pack_text(text: str) -> str:
    """``text`` compressed for a field of the job hash (``unpack_text`` reverses it)."""
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def unpack_text(packed: str) -> str:
    return zlib.decompress(base64.b64decode(packed)).decode()


def stored_result(raw: dict[str, str]) -> str | None:
    """The result JSON of a job hash: packed (``result_z``) or, written by an older version, as is."""
    if raw.get("result_z"):
        return unpack_text(raw["result_z"])
    return raw.get("result") or None


def stream_id(event_id: str) -> tuple[int, int]:
    """A stream id as Redis orders it; ``ms`` alone is ``ms-0`` (what XREAD and XRANGE read it as)."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def pack_events(rows: Sequence[tuple[str, str, str]]) -> str:
    """A finished job's whole event stream, as (id, type, data JSON) rows, packed into one field; the
    ids are kept, so Last-Event-ID resumes exactly where it would have in the stream."""
    return pack_text(json.dumps([list(row) for row in rows], separators=(",", ":")))


def unpack_events(packed: str, after: str = "0-0", count: int | None = None) -> list[Event]:
    """The events of a packed stream after ``after`` (exclusive), at most ``count`` of them."""
    start = stream_id(after)
    out = [
        Event(id=event_id, type=kind, data=json.loads(data or "{}"))
        for event_id, kind, data in json.loads(unpack_text(packed))
        if stream_id(event_id) > start
    ]
    return out if count is None else out[:count]

"""Parley's own job store in Redis: job records, batches, checkpoints and per-job event streams.

Why not Celery's result backend: it reports an unknown task id as ``PENDING`` forever, cannot stream
progress, and knows nothing about owners, batches or checkpoints. Here an unknown id is simply absent
(the API answers 404), events live in a Redis Stream per job (stream ids are the monotonically
increasing SSE event ids), and every status change goes through one Lua script so that "completed",
"failed" and "cancelled" are reached at most once per job, with their event written in the same step.

The parts: ``records`` (what is stored: job and batch records, states, usage, sizes), ``protocol``
(``JobStore``, what the gateway and the workers need), ``keys`` (the key layout), ``scripts`` (the Lua
scripts that make each step atomic) and ``redis_store`` (``RedisJobStore``, the implementation, with
``redis_quota`` for token quotas and storage and ``redis_removal`` for a client's ``DELETE``).
"""

# The status names and the usage document are the API's (parley_wire.models), shared with the client.
from parley_wire.models import ACTIVE, STATUSES, TERMINAL, TERMINAL_EVENTS, JobStatus, Usage
from services.jobstore.protocol import JobStore
from services.jobstore.records import (
    DAY_S,
    EVENTS_GRACE_S,
    EVENTS_MAXLEN,
    JOB_OVERHEAD_BYTES,
    OWNER_INDEX_MAX,
    RECORD_OVERHEAD,
    BatchRecord,
    Event,
    JobFull,
    JobRecord,
    draining_key,
    new_id,
    storage_key,
    stored_size,
    unpack_events,
    unpack_text,
    usage_day,
)
from services.jobstore.redis_store import RedisJobStore

__all__ = [
    "ACTIVE",
    "DAY_S",
    "EVENTS_GRACE_S",
    "EVENTS_MAXLEN",
    "JOB_OVERHEAD_BYTES",
    "OWNER_INDEX_MAX",
    "RECORD_OVERHEAD",
    "STATUSES",
    "TERMINAL",
    "TERMINAL_EVENTS",
    "BatchRecord",
    "Event",
    "JobFull",
    "JobRecord",
    "JobStatus",
    "JobStore",
    "RedisJobStore",
    "Usage",
    "draining_key",
    "new_id",
    "storage_key",
    "stored_size",
    "unpack_events",
    "unpack_text",
    "usage_day",
]

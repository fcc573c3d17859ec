"""The Python client of the Parley gateway, sync (``ParleyClient``) and async (``AsyncParleyClient``).

Submit a debate and wait for it or stream its events, cancel or delete it, read the key's usage, run batches
from a JSONL file or a list with a progress bar and read their results as an iterator. Answers are
the gateway's own pydantic models (``parley_wire.models``); 429 and 503 answers are retried after
their ``Retry-After``; every other error is a ``ParleyError`` carrying the RFC 9457 problem document.
The ``parley`` command line and ``parley eval --api`` use this client.

It needs httpx and pydantic only; ``ClientSettings`` (reading ``PARLEY_API_URL``/``PARLEY_API_KEY``)
needs pydantic-settings and is loaded when first used.
"""

from typing import Any

from parley_client.aio import AsyncParleyClient
from parley_client.errors import ParleyError, ParleyNotFound
from parley_client.sync import ParleyClient
from parley_wire.models import (
    Accepted,
    BatchAccepted,
    BatchDeleted,
    BatchResult,
    BatchView,
    DebateDeleted,
    DebateEvent,
    JobView,
    UsageView,
    finished_count,
)

__all__ = [
    "Accepted",
    "AsyncParleyClient",
    "BatchAccepted",
    "BatchDeleted",
    "BatchResult",
    "BatchView",
    "ClientSettings",
    "DebateDeleted",
    "DebateEvent",
    "JobView",
    "ParleyClient",
    "ParleyError",
    "ParleyNotFound",
    "UsageView",
    "finished_count",
]


def __getattr__(name: str) -> Any:
    # ClientSettings needs pydantic-settings, which a client given its URL and key does without.
    if name == "ClientSettings":
        from parley_client.settings import ClientSettings  # lazy: pydantic-settings is optional here

        return ClientSettings
    raise AttributeError(f"module 'parley_client' has no attribute {name!r}")

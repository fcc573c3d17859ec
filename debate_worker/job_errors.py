"""What ends a job's run early (``JobCancelled``, ``PoolUnavailable``, ``WorkerDraining``) and what a
client is told of a failure: never an internal address or an LLM server's reply body."""

from __future__ import annotations

import re

from services.chat_model import (
    LLMContextExceeded,
    LLMEgressRefused,
    LLMError,
    LLMProtocolError,
    LLMRateLimited,
)


class JobCancelled(Exception):
    """The job was cancelled (or finished elsewhere) while this worker ran it."""


class PoolUnavailable(Exception):
    """No knowledge pool could be built: the retriever is down or not configured."""


class WorkerDraining(Exception):
    """This worker is shutting down: the job went back to the queue and resumes elsewhere."""


def shown_reason(exc: LLMError) -> str:
    """What a client is told of an LLM failure: never the server's reply body, which a client URL
    pointed at an internal service would otherwise read back (the log keeps the whole reason)."""
    if isinstance(exc, LLMContextExceeded | LLMEgressRefused):
        return exc.reason  # Parley's own words: token counts, or the host the client gave
    if isinstance(exc, LLMProtocolError):
        return "the server's reply is not a chat completion"
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return f"HTTP {status} from the LLM server"
    if isinstance(exc, LLMRateLimited):
        return "rate limited (HTTP 429) by the LLM server"
    return exc.reason


_ADDRESS = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")


def client_safe(reason: str) -> str:
    """A failure reason fit for the API's clients: URLs (and any credential in them) replaced."""
    return _ADDRESS.sub("<internal address>", reason)[:1000]

"""The gateway's service layer says what went wrong with these typed errors, never with HTTP codes.

The service modules (``submission``, ``batches``, ``admission``, ``streams``, the idempotency store)
raise them; one exception handler (``api.problems``) maps each class to its status and problem
``type`` and answers ``application/problem+json`` (the OpenAI-compatible route turns the same
mapping into OpenAI error objects). A refusal that a client may retry names how long to wait.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A request the service layer refuses; ``detail`` is safe to show the caller."""

    def __init__(
        self, detail: str, *, retry_after_s: int | None = None, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.errors = errors


class NotFound(ServiceError):
    """No such job or batch for this key (another key's ids look missing too)."""


class AlreadyFinished(ServiceError):
    """The job (or batch) finished before the request could change it."""


class PartOfBatch(ServiceError):
    """A debate that is an item of a batch, which only the whole batch may be deleted with."""


class Invalid(ServiceError):
    """A request that does not match its schema (``errors`` lists each mismatch)."""


class Refused(ServiceError):
    """A request field the gateway will not run (``errors`` names each)."""

    def __init__(self, field: str, msg: str) -> None:
        super().__init__(f"{field}: {msg}", errors=[{"loc": field.split("."), "msg": msg, "type": "refused"}])


class InvalidBatch(ServiceError):
    """Batch items (or their config) that do not validate; ``errors`` names up to 20, by line."""


class TooDeep(ServiceError):
    """A JSON value nested deeper than the gateway reads."""


class MalformedJson(ServiceError):
    """A body (or a config part) that is not JSON."""


class TooManyJobs(ServiceError):
    """The key's unfinished jobs would exceed its limit."""


class QuotaExceeded(ServiceError):
    """The key's daily token quota cannot hold the request's reservation."""


class TooManyStreams(ServiceError):
    """The key (or this server) has as many open event streams as it may."""


class StorageTooLarge(ServiceError):
    """The request alone would store more than the key may keep."""


class StorageFull(ServiceError):
    """The key keeps as much in the job store as it may until old jobs expire."""


class IdempotencyKeyInvalid(ServiceError):
    """An ``Idempotency-Key`` outside 1..255 characters."""


class IdempotencyKeyReused(ServiceError):
    """An ``Idempotency-Key`` already used with a different request."""


class IdempotencyInProgress(ServiceError):
    """A request with this ``Idempotency-Key`` is still being handled."""

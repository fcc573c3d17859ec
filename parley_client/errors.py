"""What the client raises: the gateway's problem documents as exceptions."""

from __future__ import annotations

from typing import Any

import httpx


class ParleyError(Exception):
    """A problem+json answer from the gateway (``status``, ``detail``, the whole ``problem``), or no
    answer at all (``status`` None: the gateway could not be reached)."""

    def __init__(self, status: int | None, detail: str, problem: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}" if status is not None else detail)
        self.status = status
        self.detail = detail
        self.problem = problem or {}


class ParleyNotFound(ParleyError):
    """The gateway does not know the job or batch (wrong id, another key's, or its store was wiped)."""


# The gateway's problem types with an exception of their own (told apart by type, never by title).
BY_TYPE: dict[str, type[ParleyError]] = {"/problems/not-found": ParleyNotFound}


def error_from(resp: httpx.Response, method: str, path: str) -> ParleyError:
    """The exception for an error response (its body must have been read): the class its problem
    ``type`` names; a 404 that is no problem document (a proxy's) is a ``ParleyNotFound`` too."""
    problem: dict[str, Any] | None = None
    try:
        body = resp.json()
        problem = body if isinstance(body, dict) else None
        detail = str((problem or {}).get("detail") or (problem or {}).get("title") or resp.text[:300])
    except ValueError:
        detail = resp.text[:300] or f"{method} {path} failed"
    kind = str((problem or {}).get("type") or "about:blank")
    cls = BY_TYPE.get(kind) or (
        ParleyNotFound if resp.status_code == 404 and kind == "about:blank" else ParleyError
    )
    return cls(resp.status_code, detail, problem)

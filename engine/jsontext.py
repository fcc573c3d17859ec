"""JSON objects inside model replies: the one place that pulls them out of free text.

Models wrap the JSON they are asked for in prose, code fences or a second attempt, and small models
nest or truncate it. Every ``{`` in the reply is tried as the start of an object with the standard
decoder (``json.JSONDecoder.raw_decode``: no ``eval``, no regular expression over braces), so prose
around the object, several objects and nested braces all read the same way everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

_DECODER = json.JSONDecoder()


def json_objects(text: str | None) -> Iterator[dict[str, Any]]:
    """Every JSON object that decodes from a ``{`` of ``text``, in order of where it starts.

    An object nested inside another is yielded after it (its own ``{`` comes later), so a caller
    looking for a key still finds ``{"answer": ...}`` inside ``{"result": {"answer": ...}}``.
    Invalid or truncated JSON is skipped, never raised.
    """
    if not text:
        return
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            yield obj
        start = text.find("{", start + 1)


def first_json_object(text: str | None, key: str | None = None) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (with ``key`` among its keys when given), else None."""
    for obj in json_objects(text):
        if key is None or key in obj:
            return obj
    return None

"""Limits on JSON bodies that hold before anything is parsed: nesting depth and the number of values.

Python's ``json`` recurses once per nesting level, so ``[[[[...]]]]`` 100,000 deep raises
``RecursionError`` (a 500) deep inside the parser; and a 32 MiB body of tiny values (``[{}, {}, ...]``)
expands to about 0.8 GB of Python objects. Both are measured here on the raw bytes with numpy, a MiB
at a time (no per-byte Python loop, no array larger than a few MiB): which bytes lie inside string
literals follows from the running count of unescaped quotes, and the depth is the running sum of
+1/-1 over the brackets outside them. Batch items are then decoded one at a time
(``JSONDecoder.raw_decode``) and JSONL lines read lazily, so an over-long batch is refused after
``max_items + 1`` items, not after all of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response

_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
_IS_VALUE = np.zeros(256, dtype=bool)
_IS_VALUE[list(b"[{,")] = True
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_CHUNK = 1 << 20
_SCAN_IN_PLACE = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_NEWLINE = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class JsonShape:
    """How deep a JSON text nests and roughly how many values it holds (containers plus commas)."""

    depth: int
    values: int


def json_shape(data: bytes | str) -> JsonShape:
    """Depth and value count of ``data`` without parsing it; exact for valid JSON.

    Brackets and commas inside string literals do not count: a quote opens or closes a string unless
    an odd run of backslashes precedes it. For text that is not valid JSON the figures still bound
    what ``json.loads`` would build before it fails, since both read the valid prefix alike.
    """
    raw = data.encode() if isinstance(data, str) else data
    everything = np.frombuffer(raw, dtype=np.uint8)
    has_quotes = b'"' in raw
    depth = deepest = values = 0
    quotes_before = 0  # unescaped quotes so far: odd means inside a string
    backslashes_before = 0  # length of the backslash run that ends the previous chunk
    for start in range(0, len(everything), _CHUNK):
        chunk = everything[start : start + _CHUNK]
        steps = _STEP[chunk]
        counted = _IS_VALUE[chunk]
        if has_quotes:
            quotes = chunk == _QUOTE
            backslash = chunk == _BACKSLASH
            if backslash.any() or backslashes_before:
                # Length of the backslash run ending at each byte, from the last byte that is not one.
                index = np.arange(len(chunk), dtype=np.int64)
                last_other = np.maximum.accumulate(np.where(backslash, -1 - backslashes_before, index))
                run_before = np.empty(len(chunk), dtype=np.int64)
                run_before[0] = backslashes_before
                run_before[1:] = index[:-1] - last_other[:-1]
                quotes &= (run_before & 1) == 0
                backslashes_before = int(len(chunk) - 1 - last_other[-1])
            opened = np.cumsum(quotes, dtype=np.int64)
            inside = ((opened + quotes_before) & 1).astype(bool)
            quotes_before += int(opened[-1])
            steps[inside] = 0
            counted &= ~inside
        values += int(np.count_nonzero(counted))
        running = np.cumsum(steps, dtype=np.int32)
        running += depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return JsonShape(depth=deepest, values=values)


def too_deep(data: bytes | str, limit: int) -> bool:
    """Whether ``data`` nests deeper than ``limit``; a cheap count first, the full scan only if needed."""
    if isinstance(data, str):
        data = data.encode()
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return json_shape(data).depth > limit


def count_values(data: bytes, *, exact_above: int = 64) -> int:
    """The values ``json.loads(data)`` would build, roughly: a quick upper bound (brackets and commas,
    those inside strings too) while it is small, the exact scan beyond ``exact_above``."""
    rough = data.count(b",") + data.count(b"[") + data.count(b"{")
    return rough if rough <= exact_above else json_shape(data).values


class TooManyItems(Exception):
    """More items than allowed; raised on the first one over the limit."""


class NotABatch(Exception):
    """A body that is JSON but not ``{"items": [...], "config": {...}}``."""


@dataclass
class BatchDocument:
    items: list[Any]
    config: Any


def _skip_ws(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return match.end() if match else i


def parse_batch_json(text: str, *, max_items: int, max_config_chars: int) -> BatchDocument:
    """Read ``{"items": [...], "config": {...}}`` member by member and the items one at a time.

    Raises ``json.JSONDecodeError`` (malformed), ``NotABatch`` (wrong shape, refused as soon as it is
    seen, before the rest of the body is read) or ``TooManyItems`` (at item ``max_items + 1``).
    """
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if text[i : i + 1] != "{":
        _refuse_non_object(decoder, text, i, max_items)
    i = _skip_ws(text, i + 1)
    items: list[Any] | None = None
    config: Any = {}  # absent: the defaults; an explicit null is refused like any non-object
    if text[i : i + 1] == "}":
        raise NotABatch("body must be an object with an 'items' list")
    while True:
        key, i = _read_key(decoder, text, i)
        if key == "items":
            if text[i : i + 1] != "[":
                raise NotABatch("body must be an object with an 'items' list")
            items, i = _read_array(decoder, text, i, max_items)
        elif key == "config":
            config, i = _read_config(decoder, text, i, max_config_chars)
        else:
            raise NotABatch(f"unknown fields: {[key]}")
        i = _skip_ws(text, i)
        ch = text[i : i + 1]
        i = _skip_ws(text, i + 1)
        if ch == "}":
            break
        if ch != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
    if text[i:].strip():
        raise json.JSONDecodeError("Extra data", text, i)
    if items is None:
        raise NotABatch("body must be an object with an 'items' list")
    return BatchDocument(items=items, config=config)


def _read_key(decoder: json.JSONDecoder, text: str, i: int) -> tuple[Any, int]:
    """A member's name and the position of its value (past the ``:``)."""
    if text[i : i + 1] != '"':
        raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
    key, i = decoder.raw_decode(text, i)
    i = _skip_ws(text, i)
    if text[i : i + 1] != ":":
        raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
    return key, _skip_ws(text, i + 1)


def _read_config(decoder: json.JSONDecoder, text: str, i: int, max_config_chars: int) -> tuple[Any, int]:
    """The config value at ``i`` and the position after it.

    A config is a handful of settings: it is decoded from a bounded window, so a huge value is refused
    without being built.
    """
    window = text[i : i + max_config_chars]
    cut = i + len(window) < len(text)
    try:
        config, end = decoder.raw_decode(window)
    except json.JSONDecodeError:
        if cut:
            raise NotABatch(f"config is larger than {max_config_chars} characters") from None
        raise
    if end == len(window) and cut:
        raise NotABatch(f"config is larger than {max_config_chars} characters")
    return config, i + end


def _read_array(decoder: json.JSONDecoder, text: str, i: int, max_items: int) -> tuple[list[Any], int]:
    """The array starting at ``text[i] == '['``, decoded element by element; stops past ``max_items``."""
    out: list[Any] = []
    i = _skip_ws(text, i + 1)
    if text[i : i + 1] == "]":
        return out, i + 1
    while True:
        value, i = decoder.raw_decode(text, i)
        out.append(value)
        if len(out) > max_items:
            raise TooManyItems
        i = _skip_ws(text, i)
        ch = text[i : i + 1]
        if ch == "]":
            return out, i + 1
        if ch != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
        i = _skip_ws(text, i + 1)


def _refuse_non_object(decoder: json.JSONDecoder, text: str, i: int, max_items: int) -> None:
    """A body that is not an object: 400 if it is malformed, else 422, building at most a bounded part."""
    if text[i : i + 1] == "[":
        try:
            _, end = _read_array(decoder, text, i, max_items)
        except TooManyItems:
            raise NotABatch("body must be an object with an 'items' list") from None
    else:
        _, end = decoder.raw_decode(text, i)
    if text[end:].strip():
        raise json.JSONDecodeError("Extra data", text, end)
    raise NotABatch("body must be an object with an 'items' list")


def iter_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Lines of ``data`` numbered from 1 (``\\n``, ``\\r\\n`` or ``\\r`` end them), one at a time.

    Unlike ``bytes.splitlines`` nothing is built ahead: a reader that stops early has copied only the
    lines it looked at.
    """
    start = 0
    number = 0
    for match in _NEWLINE.finditer(data):
        number += 1
        yield number, data[start : match.start()]
        start = match.end()
    if start < len(data):
        yield number + 1, data[start:]


JSON_TYPES = ("application/json", "")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_json_type(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media in JSON_TYPES or media.endswith("+json")


class JsonDepthMiddleware:
    """400 ``/problems/too-deep`` for a JSON body nested deeper than ``limit``, before any route parses it.

    The body is read whole (the body-size middleware outside this one has already bounded it), checked,
    and handed on unchanged.
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        content_type = ""
        for name, value in scope.get("headers", []):
            if name == b"content-type":
                content_type = value.decode("latin-1")
        if not is_json_type(content_type):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        first: Message | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # the client left: let the app see it
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        del chunks
        # A large body is scanned in a worker thread, so the event loop serves others meanwhile.
        small = len(body) <= _SCAN_IN_PLACE
        deep = (
            too_deep(body, self.limit)
            if small
            else await anyio.to_thread.run_sync(too_deep, body, self.limit)
        )
        if first is None and deep:
            response = problem_response(
                None,
                400,
                f"JSON body nests deeper than {self.limit} levels",
                type_="/problems/too-deep",
            )
            await response(scope, receive, send)
            return
        pending: Message | None = first or {"type": "http.request", "body": body, "more_body": False}
        del body  # the message holds it until the app takes it, then nothing here does

        async def replay() -> Message:
            nonlocal pending
            if pending is not None:
                message, pending = pending, None
                return message
            return await receive()

        await self.app(scope, replay, send)

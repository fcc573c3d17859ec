"""Schemathesis hooks for ``bench/fuzz_live.py``: each generated request uses its own Idempotency-Key,
each item of a generated batch its own id, and the JSON lines of a batch upload are generated as JSON
lines.

The gateway answers a key reused with a different body with 422 ``/problems/idempotency-key-reused``
(the IETF Idempotency-Key draft's answer, documented in the OpenAPI document); a client is to use a
fresh key per distinct request. Schemathesis generates each request on its own and, deterministic,
gives many of them the same short keys, so without this hook its ``positive_data_acceptance`` check
would count every such reuse as a schema-valid request refused. The hook keeps the fuzzer's key and
makes it the body's own (a suffix from the body's hash), within the schema's 1..255 characters; a
key the fuzzer made invalid on purpose is left as it is. The reuse itself is tested in
``tests/api/test_intake.py``.

Item ids are the same kind of rule: a batch whose items repeat an ``id`` is refused (422, the line of
the repeat named; ``tests/api/test_intake.py``), since results are read by id, and JSON Schema cannot
say that a field is unique across the items of an array. The hook gives a repeated id a suffix
(``~2``, ``~3``…, within the schema's 200 characters) in a valid batch body, as schemathesis itself
advises for unique fields; schemathesis revalidates the edited body.

The multipart ``file`` part of ``POST /v1/batches`` is text of media type ``application/jsonl`` (the
document's ``encoding``): JSON lines of batch items, which no JSON Schema keyword can describe inside
a string. Schemathesis's answer for such a media type is a strategy registered for it
(``schemathesis.openapi.media_type``), used for the part instead of the string schema; this one writes
one to four items a line, each with a question, a gold answer and, on some, a unique id. Every check
runs on that operation, ``positive_data_acceptance`` included; random bytes or an image are no text
of JSON lines and are not generated as valid.
"""

from __future__ import annotations

import hashlib
import json
import string
from typing import Any

import schemathesis
from hypothesis import strategies as st

HEADER = "idempotency-key"
MAX_LENGTH = 255
MAX_ID_LENGTH = 200
BATCHES = "POST /v1/batches"
MULTIPART = "multipart/form-data"
JSONL = "application/jsonl"

_WORDS = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=12)


@st.composite
def _jsonl_items(draw: st.DrawFn) -> bytes:
    """One to four batch items as JSON lines; ids, where given, unique within the file."""
    count = draw(st.integers(min_value=1, max_value=4))
    lines = []
    for n in range(count):
        words = draw(st.lists(_WORDS, min_size=1, max_size=8))
        item: dict[str, Any] = {"question": " ".join(words) + "?", "answers": [draw(_WORDS)]}
        if draw(st.booleans()):
            item["id"] = f"{draw(_WORDS)}-{n}"
        lines.append(json.dumps(item))
    trailing = "\n" if draw(st.booleans()) else ""
    return ("\n".join(lines) + trailing).encode()


schemathesis.openapi.media_type(JSONL, _jsonl_items(), aliases=["application/x-ndjson"])


def _body_digest(body: Any) -> str:
    """A digest that differs wherever the bodies sent differ, key order included: the gateway
    fingerprints a debate's body as sent, so the same object with its keys in another order is
    another body (sorting the keys here gave both one key, and the second a 422)."""
    text = json.dumps(body, default=repr) if not isinstance(body, bytes) else body.hex()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _unique_item_ids(body: Any) -> None:
    """Give each repeated item id of a batch body a suffix that makes it unique."""
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return
    seen = {item["id"] for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)}
    first: set[str] = set()
    for item in items:
        ident = item.get("id") if isinstance(item, dict) else None
        if not isinstance(ident, str):
            continue
        if ident not in first:
            first.add(ident)
            continue
        n = 2
        while (fresh := ident[: MAX_ID_LENGTH - len(f"~{n}")] + f"~{n}") in seen:
            n += 1
        seen.add(fresh)
        first.add(fresh)
        item["id"] = fresh


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    meta = getattr(case, "meta", None)
    if meta is None or not meta.generation.mode.is_positive:
        return  # a request made invalid on purpose (a header left out, a key too long) stays as it is
    if case.operation.label == BATCHES and case.media_type != MULTIPART:
        _unique_item_ids(case.body)
    headers = case.headers or {}
    name = next((k for k in headers if k.lower() == HEADER), None)
    if name is None:
        return
    key = headers[name]
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_LENGTH:
        return
    suffix = "~" + _body_digest(case.body)
    headers[name] = key[: MAX_LENGTH - len(suffix)] + suffix

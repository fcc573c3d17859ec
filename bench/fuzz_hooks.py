"""Schemathesis hooks for ``bench/fuzz_live.py``: each generated request uses its own Idempotency-Key,
each item of a generated batch its own id, and ``positive_data_acceptance`` keeps checking the JSON
body of ``POST /v1/batches``.

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

``bench/schemathesis.toml`` switches ``positive_data_acceptance`` off for ``POST /v1/batches``, for the
sake of its multipart body (a ``file`` part of JSON lines, which no schema can describe inside a binary
part). Schemathesis switches checks per operation, not per body, so ``batch_body_acceptance`` runs
the same check on that operation's other bodies (the JSON one): only the multipart upload goes
unchecked.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

HEADER = "idempotency-key"
MAX_LENGTH = 255
MAX_ID_LENGTH = 200
BATCHES = "POST /v1/batches"
MULTIPART = "multipart/form-data"


def _body_digest(body: Any) -> str:
    text = json.dumps(body, sort_keys=True, default=repr) if not isinstance(body, bytes) else body.hex()
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


@schemathesis.check
def batch_body_acceptance(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance`` for the bodies of ``POST /v1/batches`` other than the multipart one."""
    if case.operation.label != BATCHES or case.media_type == MULTIPART:
        return None
    result: bool | None = positive_data_acceptance(ctx, response, case)
    return result

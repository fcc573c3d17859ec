"""A schemathesis hook for ``bench/fuzz_live.py``: each generated request uses its own Idempotency-Key.

The gateway answers a key reused with a different body with 422 ``/problems/idempotency-key-reused``
(the IETF Idempotency-Key draft's answer, documented in the OpenAPI document); a client is to use a
fresh key per distinct request. Schemathesis generates each request on its own and, deterministic,
gives many of them the same short keys, so without this hook its ``positive_data_acceptance`` check
would count every such reuse as a schema-valid request refused. The hook keeps the fuzzer's key and
makes it the body's own (a suffix from the body's hash), within the schema's 1..255 characters; a
key the fuzzer made invalid on purpose is left as it is. The reuse itself is tested in
``tests/api/test_intake.py``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import schemathesis

HEADER = "idempotency-key"
MAX_LENGTH = 255


def _body_digest(body: Any) -> str:
    text = json.dumps(body, sort_keys=True, default=repr) if not isinstance(body, bytes) else body.hex()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    meta = getattr(case, "meta", None)
    if meta is None or not meta.generation.mode.is_positive:
        return  # a request made invalid on purpose (a header left out, a key too long) stays as it is
    headers = case.headers or {}
    name = next((k for k in headers if k.lower() == HEADER), None)
    if name is None:
        return
    key = headers[name]
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_LENGTH:
        return
    suffix = "~" + _body_digest(case.body)
    headers[name] = key[: MAX_LENGTH - len(suffix)] + suffix

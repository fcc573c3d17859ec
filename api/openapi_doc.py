"""The finishing touches of the gateway's OpenAPI document, so that it says exactly what the API
accepts and answers.

- Every 4xx/5xx response is an RFC 9457 ``Problem`` (``application/problem+json``), and each lists the
  problem ``type``s it can carry (as an ``enum`` of the schema and in its description): the statuses
  come from what the request carries — a security requirement (401, 429), a body (400, 413, 422), an
  ``Idempotency-Key`` (409 in progress, 422 reused), parameters (422); every route reads Redis (503) —
  and a route adds its own with ``problem(description, *types)``. FastAPI's own
  ``HTTPValidationError`` 422 schema is replaced, since the handlers answer validation errors as
  problems.
- An optional query or header parameter is absent or a value; JSON ``null`` is no value a header or a
  query string can carry, so the ``null`` branch FastAPI writes for ``str | None`` is dropped.
"""

from __future__ import annotations

from typing import Any

from services.problem_details import PROBLEM_JSON

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "RFC 9457 problem details; validation problems list each field in `errors`",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "URI reference naming the kind of problem"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "the request path"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
}

# What each status means on this API, for responses a route does not describe itself.
PROBLEM_DESCRIPTIONS = {
    400: "malformed request: a body that is not JSON or nests too deep",
    401: "missing or unknown API key (WWW-Authenticate: Bearer)",
    404: "unknown id, or one of another key",
    409: "conflict with the resource's state, or an Idempotency-Key still in progress",
    413: "request body over the size limit",
    422: "invalid request; `errors` names each refused field",
    429: "rate limit, active-job limit, daily token quota or failed-authentication limit (Retry-After)",
    503: "the job store or broker is unavailable; retry after Retry-After seconds",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before retrying",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
# The key under which a route's ``responses`` name their problem types (taken out of the document).
TYPES_KEY = "x-problem-types"
# Not a route's problem: the router's own answer for a path it does not know (a path parameter that
# holds a ``/`` routes nowhere), and the framework's for a body it cannot read.
FRAMEWORK = "about:blank"


def problem(description: str, *types: str) -> dict[str, Any]:
    """A route's problem response for ``responses=``: what it means and the problem types it carries."""
    return {"description": description, TYPES_KEY: list(types)}


def finish_document(openapi: dict[str, Any]) -> dict[str, Any]:
    """The document FastAPI generated, with problem responses and optional parameters made exact."""
    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM_SCHEMA
    for item in openapi.get("paths", {}).values():
        for op in item.values():
            if isinstance(op, dict) and "responses" in op:
                _optional_parameters(op)
                _document_operation(op)
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return openapi


def _optional_parameters(op: dict[str, Any]) -> None:
    for param in op.get("parameters", []):
        schema = param.get("schema", {})
        branches = schema.get("anyOf")
        if param.get("required") or not isinstance(branches, list):
            continue
        values = [b for b in branches if b != {"type": "null"}]
        if len(values) == 1 and len(values) < len(branches):
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            param["schema"] = {**values[0], **rest}


def _problem_types(op: dict[str, Any]) -> dict[int, set[str]]:
    """The problem statuses an operation can give and their types, from what its request carries."""
    types: dict[int, set[str]] = {503: {"/problems/unavailable", "/problems/store-full"}}

    def add(status: int, *names: str) -> None:
        types.setdefault(status, set()).update(names)

    if op.get("security"):
        add(401, FRAMEWORK)
        add(429, "/problems/rate-limited", "/problems/auth-rate-limited")
    if op.get("requestBody"):
        # about:blank: a body the framework cannot decode at all (not UTF-8)
        add(400, "/problems/malformed-json", "/problems/too-deep", FRAMEWORK)
        add(413, "/problems/body-too-large")
        add(422, "/problems/validation")
    params = op.get("parameters", [])
    if params:
        add(422, "/problems/validation")
    if any(p.get("in") == "path" for p in params):
        add(404, FRAMEWORK)
    headers = {p.get("name", "").lower() for p in params if p.get("in") == "header"}
    if "idempotency-key" in headers:
        add(409, "/problems/idempotency-in-progress")
        add(422, "/problems/idempotency-key-reused")
    for code, response in op["responses"].items():
        declared = response.pop(TYPES_KEY, None)
        if declared is not None:
            add(int(code), *declared)
    return types


def _document_operation(op: dict[str, Any]) -> None:
    responses = op["responses"]
    types = _problem_types(op)
    for status in types:
        responses.setdefault(str(status), {})
    for code, response in responses.items():
        if not code.isdigit() or int(code) < 400:
            continue
        if response.get("description") in (None, "", "Additional Response"):
            response["description"] = PROBLEM_DESCRIPTIONS.get(int(code), "problem")
        names = sorted(types.get(int(code), ()))
        schema: dict[str, Any] = {"$ref": "#/components/schemas/Problem"}
        if names:
            response["description"] += "; problem types: " + ", ".join(f"`{n}`" for n in names)
            schema = {"allOf": [schema, {"properties": {"type": {"enum": names}}}]}
        response["content"] = {PROBLEM_JSON: {"schema": schema}}
        if int(code) in (429, 503):
            response["headers"] = _RETRY_AFTER
    op["responses"] = dict(sorted(responses.items()))

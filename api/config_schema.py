"""The debate config's schema as this deployment admits it, written into the OpenAPI document.

pydantic's schema of ``DebateConfig`` says what each field may hold anywhere; a deployment narrows
it: the budget caps (``PARLEY_API_BUDGET_*_MAX``), the LLM endpoints a team may name
(``PARLEY_API_LLM_ENDPOINTS``), and whether a client may name a URL and model of its own
(``PARLEY_API_ALLOW_CLIENT_URLS``). A question must hold some text once stripped. These are written
here from the same settings the admission reads.

The rules between fields (a setting the protocol does not use must keep its default, one ``team``
entry per agent, a protocol's agent limits, mallm's voting within the turn limit, a pool only for a
config that uses one, gold answers for ``truth_last``) are in the descriptions and are answered 422
``/problems/validation`` naming the field: written as JSON Schema conditionals they are exact, but
schema-driven clients and fuzzers (schemathesis among them) cannot generate requests from them.
"""

from __future__ import annotations

from typing import Any

from api.settings import ApiSettings

# What Python's str.strip() removes (str.isspace), spelled out: JSON Schema's \s is another set.
_PY_SPACE = "\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
QUESTION_PATTERN = f"[^{_PY_SPACE}]"
NULL = {"type": "null"}


def exact_schemas(openapi: dict[str, Any], settings: ApiSettings) -> dict[str, Any]:
    """Narrow the document's config and request schemas to what this deployment admits."""
    schemas = openapi.get("components", {}).get("schemas", {})
    if "DebateConfig" not in schemas:
        return openapi
    _budgets(schemas["DebateConfig"], settings)
    _agent_spec(schemas["AgentSpec"], settings)
    _question(schemas["DebateRequest"])
    batch = openapi["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    _question(batch["properties"]["items"]["items"])
    return openapi


def _budgets(schema: dict[str, Any], settings: ApiSettings) -> None:
    props = schema["properties"]
    caps = (("budget_calls", settings.budget_calls_max), ("budget_tokens", settings.budget_tokens_max))
    for name, cap in caps:
        for branch in props[name].get("anyOf", []):
            if branch.get("type") == "integer":
                branch["maximum"] = min(cap, branch.get("maximum", cap))
        props[name]["description"] += f"; at most {cap} on this deployment (None = its default)"


def _agent_spec(schema: dict[str, Any], settings: ApiSettings) -> None:
    props = schema["properties"]
    names = list(settings.llm_endpoints)
    props["endpoint"] = {**props["endpoint"], "anyOf": [{"enum": names}, NULL] if names else [NULL]}
    if not settings.allow_client_urls:
        # A URL and model of the client's own are refused here; a team names operator endpoints.
        for name in ("base_url", "model"):
            kept = {
                k: v for k, v in props[name].items() if k not in ("anyOf", "type", "maxLength", "pattern")
            }
            props[name] = {**kept, **NULL}
    else:
        for branch in props["base_url"].get("anyOf", []):
            if branch.get("type") == "string":
                branch["pattern"] = "^https?://"


def _question(schema: dict[str, Any]) -> None:
    """A question with some text: what is left after ``strip()`` may not be empty."""
    schema["properties"]["question"]["pattern"] = QUESTION_PATTERN

"""The debate config's schema as this deployment admits it, written into the OpenAPI document.

pydantic's schema of ``DebateConfig`` says what each field may hold anywhere. The gateway admits
less, and the document says so, from the same registry and settings the validation reads:

- the deployment's own limits: the budget caps (``PARLEY_API_BUDGET_*_MAX``), the LLM endpoints a
  team may name (``PARLEY_API_LLM_ENDPOINTS``), no URL or model of the client's own unless
  ``PARLEY_API_ALLOW_CLIENT_URLS``, the ``search_query`` modes enabled
  (``PARLEY_API_SEARCH_QUERY_MODES``); a question with some text once stripped;
- the rules between fields, one alternative per protocol: a setting the protocol does not use keeps
  its default (``knowledge: "none"`` and one agent for a single-agent protocol are allowed too), the
  protocol's agent limits, one ``team`` entry per agent; mallm's collective improvement only with a
  voting decision; a request's pool only for a config that builds one, gold answers for
  ``truth_last``.

Alternatives (``anyOf``) rather than conditionals (``if``/``then``): schema-driven generators draw
from the former and some refuse the latter (schemathesis 4 does). What stays in prose therefore: a
client URL, where allowed, is checked against the operator's networks. (mallm's ``vote_after`` may
exceed ``rounds``: the vote is then held after the last turn, as its description says.)
"""

from __future__ import annotations

from typing import Any

from api.settings import ApiSettings
from engine.config import MAX_AGENTS, DebateConfig
from engine.protocols.mallm.settings import VOTING_DECISIONS
from engine.registry import PROTOCOLS

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
    _search_query(schemas["DebateConfig"], settings)
    _debate_search(schemas["DebateSearchSettings"], settings)
    _by_protocol(schemas["DebateConfig"])
    _mallm_rules(schemas["MallmSettings"])
    _agent_spec(schemas["AgentSpec"], settings)
    _question(schemas["DebateRequest"])
    _request_rules(schemas["DebateRequest"], items=False)
    batch = openapi["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    _question(batch["properties"]["items"]["items"])
    _request_rules(batch, items=True)
    return openapi


def _budgets(schema: dict[str, Any], settings: ApiSettings) -> None:
    props = schema["properties"]
    caps = (("budget_calls", settings.budget_calls_max), ("budget_tokens", settings.budget_tokens_max))
    for name, cap in caps:
        for branch in props[name].get("anyOf", []):
            if branch.get("type") == "integer":
                branch["maximum"] = min(cap, branch.get("maximum", cap))
        props[name]["description"] += f"; at most {cap} on this deployment (None = its default)"


def _search_query(schema: dict[str, Any], settings: ApiSettings) -> None:
    """Only the modes the operator enabled."""
    prop = schema["properties"]["search_query"]
    prop["enum"] = [m for m in prop["enum"] if m in settings.search_query_modes]
    prop["description"] += f"; enabled on this deployment: {', '.join(prop['enum'])}"


def _debate_search(schema: dict[str, Any], settings: ApiSettings) -> None:
    """Searches during the debate up to the operator's limit per debater."""
    prop = schema["properties"]["per_agent"]
    prop["maximum"] = min(settings.max_debate_searches, prop.get("maximum", settings.max_debate_searches))
    prop["description"] += f"; at most {settings.max_debate_searches} on this deployment"


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


# -- the rules between fields ---------------------------------------------------------------------

DEFAULT_PROTOCOL = DebateConfig.model_fields["protocol"].default
DEFAULT_AGENTS = DebateConfig.model_fields["agents"].default
NO_TEAM = [NULL, {"type": "array", "maxItems": 0}]
VOTING = {"enum": sorted(VOTING_DECISIONS)}


def _default_only(name: str) -> dict[str, Any]:
    """A field the protocol does not use: absent or its default, nothing else."""
    if name == "team":
        return {"anyOf": NO_TEAM}
    default = DebateConfig.model_fields[name].get_default(call_default_factory=True)
    if hasattr(default, "model_dump"):  # mad, mallm: each given member at its default
        return {"properties": {k: {"const": v} for k, v in default.model_dump(mode="json").items()}}
    if name == "knowledge":
        return {"enum": [default, "none"]}  # "none" says what a protocol without knowledge does
    return {"const": default}


def _team_sizes(low: int, high: int) -> list[dict[str, Any]]:
    """One team entry per agent (no team, or an empty one, is every agent with the defaults)."""
    out = []
    for n in range(low, high + 1):
        alt: dict[str, Any] = {
            "properties": {
                "agents": {"const": n},
                "team": {"anyOf": [*NO_TEAM, {"type": "array", "minItems": n, "maxItems": n}]},
            }
        }
        if n != DEFAULT_AGENTS:
            alt["required"] = ["agents"]
        out.append(alt)
    return out


def _protocol_branch(name: str) -> dict[str, Any]:
    spec = PROTOCOLS[name]
    props: dict[str, Any] = {"protocol": {"const": name}}
    for field in DebateConfig.model_fields:
        if field not in spec.settings and field not in ("agents", "protocol"):
            props[field] = _default_only(field)
    branch: dict[str, Any] = {"properties": props}
    if name != DEFAULT_PROTOCOL:
        branch["required"] = ["protocol"]
    if spec.single_agent:
        props["agents"] = {"enum": sorted({1, DEFAULT_AGENTS})}
    else:
        branch["anyOf"] = _team_sizes(spec.min_agents, spec.max_agents or MAX_AGENTS)
    return branch


def _by_protocol(schema: dict[str, Any]) -> None:
    schema["anyOf"] = [_protocol_branch(name) for name in PROTOCOLS]


def _mallm_rules(schema: dict[str, Any]) -> None:
    # collective_improvement works only with a voting decision
    schema["anyOf"] = [
        {"properties": {"paradigm": {"enum": ["memory", "drafting"]}}},
        {
            "properties": {
                "paradigm": {"const": "collective_improvement"},
                "decision": {"enum": sorted(VOTING_DECISIONS)},
            },
            "required": ["paradigm", "decision"],
        },
    ]


def _request_rules(schema: dict[str, Any], items: bool) -> None:
    pools = sorted(n for n, s in PROTOCOLS.items() if s.uses_pool)
    needs_pool = {
        "properties": {"protocol": {"enum": pools}, "knowledge": {"enum": ["all", "wikipedia", "web"]}},
        "anyOf": [{"properties": {"k_wiki": {"minimum": 1}}}, {"properties": {"k_web": {"minimum": 1}}}],
    }
    no_gold = {"properties": {"ordering": {"enum": ["fixed", "random", "madc"]}}}
    answers = {"type": "array", "minItems": 1}
    if not items:
        gold = {"properties": {"answers": answers}, "required": ["answers"]}
        schema["allOf"] = [
            {"anyOf": [{"properties": {"pool": NULL}}, {"properties": {"config": needs_pool}}]},
            {
                "anyOf": [
                    {"properties": {"config": no_gold}},
                    {"properties": {"answers": answers}, "required": ["answers"]},
                ]
            },
        ]
        return
    item = {"properties": {"items": {"items": {"properties": {"pool": NULL}}}}}
    gold = {"properties": {"items": {"items": {"properties": {"answers": answers}, "required": ["answers"]}}}}
    schema["allOf"] = [
        {"anyOf": [item, {"properties": {"config": needs_pool}}]},
        {"anyOf": [{"properties": {"config": no_gold}}, gold]},
    ]

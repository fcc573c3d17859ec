"""What a client's debate config may ask for: the operator's endpoints by name, budgets within limits.

A config that arrives over HTTP is the client's, and client input never chooses where a worker
connects, which credentials it sends, or how much it spends beyond the operator's limits. The engine
accepts URLs and model names (the operator's CLI needs them); this gate refuses them for clients
unless the operator allows client URLs (then no operator key is ever sent to them, see
``services.llm_factory``), checks endpoint names against the ones the operator lists, and fills in or
bounds the per-job budgets. Every refusal is a 422 problem naming the field.
"""

from __future__ import annotations

from typing import Any

from api.problems import Problem
from api.settings import ApiSettings
from debate_worker.engine.config import DebateConfig


def refused(field: str, msg: str) -> Problem:
    return Problem(
        422,
        f"{field}: {msg}",
        type_="/problems/validation",
        extra={"errors": [{"loc": field.split("."), "msg": msg, "type": "refused"}]},
    )


def admit_pool(config: DebateConfig, pool: list[Any] | None, *, field: str = "pool") -> None:
    """A pool brought with a question must be one the protocol would use."""
    if pool is None:
        return
    if not config.needs_pool:
        raise refused(field, f"protocol {config.protocol!r} with knowledge={config.knowledge!r} uses no pool")


def admit_config(config: DebateConfig, settings: ApiSettings, *, field: str = "config") -> DebateConfig:
    """The config as it will run (budgets filled in), or a 422 ``Problem`` naming the refused field."""
    known = ", ".join(settings.llm_endpoints) or "none configured"
    for i, spec in enumerate(config.team or []):
        where = f"{field}.team.{i}"
        if spec.base_url is not None and not settings.allow_client_urls:
            raise refused(
                f"{where}.base_url",
                f"clients cannot choose an LLM URL; name one of the operator's endpoints with "
                f"'endpoint' (known: {known})",
            )
        if spec.model is not None and spec.base_url is None:
            raise refused(
                f"{where}.model",
                f"the model of an operator endpoint is the operator's; name an endpoint with "
                f"'endpoint' (known: {known})",
            )
        if spec.endpoint is not None and spec.endpoint not in settings.llm_endpoints:
            raise refused(f"{where}.endpoint", f"no LLM endpoint named {spec.endpoint!r} (known: {known})")
    update: dict[str, Any] = {}
    for name, default, limit in (
        ("budget_calls", settings.budget_calls_default, settings.budget_calls_max),
        ("budget_tokens", settings.budget_tokens_default, settings.budget_tokens_max),
    ):
        asked = getattr(config, name)
        if asked is None:
            update[name] = default
        elif asked > limit:
            raise refused(f"{field}.{name}", f"{asked} is above this deployment's limit of {limit}")
    return config.model_copy(update=update) if update else config

"""Which chat model plays each role of a debate: the role-to-endpoint map of the registry, the
``RoleModels`` port the caller supplies, one model for every role, and heterogeneous teams that route
an agent's calls to its own model or endpoint (Wu et al.)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from engine.registry import role_endpoints
from services.chat_model import ChatModel

# Which configured endpoint serves which transcript role (from the protocol registry).
ROLE_ENDPOINT = role_endpoints()


def endpoint_for(role: str) -> str:
    """The endpoint that plays ``role``; a role no protocol declares is a bug, never the debater's."""
    try:
        return ROLE_ENDPOINT[role]
    except KeyError:
        raise ValueError(f"role {role!r} is not declared by any protocol in the registry") from None


class RoleModels(Protocol):
    """Maps a role (and, for heterogeneous teams, an agent) to the model that plays it."""

    def for_role(self, role: str, agent: int | None = None) -> ChatModel: ...


def fallback_model(models: RoleModels, endpoint: str) -> ChatModel | None:
    """The model that answers a call ``endpoint`` failed, when the role models offer one
    (``fallback_for``: the operator's judge and summarizer fallbacks); None otherwise."""
    fallback_for = getattr(models, "fallback_for", None)
    return fallback_for(endpoint) if fallback_for is not None else None


class SingleModel:
    """Every role played by one model: the common case and the test default."""

    def __init__(self, model: ChatModel) -> None:
        self._model = model

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        return self._model


class AgentClientFactory(Protocol):
    """What ``services.llm.factory.RoleModelsFromSettings`` offers for per-agent endpoints."""

    def agent_client(
        self,
        role: str,
        *,
        endpoint: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
    ) -> ChatModel: ...


class TeamModels:
    """``RoleModels`` that routes an agent's calls to its own model/endpoint (heterogeneous teams).

    Calls without an agent (judge, moderator, summarizer) and agents without an override go to the
    wrapped role models. A per-agent endpoint needs the wrapped object to offer ``agent_client``;
    otherwise the team is refused rather than silently played by one model.
    """

    def __init__(self, base: RoleModels, team: Sequence[Any]) -> None:
        self._base = base
        self._team = list(team)
        self._cache: dict[tuple[str, int], ChatModel] = {}
        needs_factory = any(_routes_elsewhere(s) for s in self._team)
        if needs_factory and not hasattr(base, "agent_client"):
            raise ValueError(
                "team: per-agent models or endpoints need role models that can open per-agent clients"
            )
        if needs_factory:
            # Resolve every agent once up front: an unknown endpoint name fails the debate before
            # its first call, not in round 3.
            for agent, spec in enumerate(self._team):
                if _routes_elsewhere(spec):
                    self.for_role("debater", agent)

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        if agent is None or not 0 <= agent < len(self._team):
            return self._base.for_role(role, agent)
        spec = self._team[agent]
        if not _routes_elsewhere(spec):
            return self._base.for_role(role, agent)
        key = (role, agent)
        if key not in self._cache:
            factory: AgentClientFactory = self._base  # type: ignore[assignment]
            self._cache[key] = factory.agent_client(
                role, endpoint=spec.endpoint, base_url=spec.base_url, model=spec.model
            )
        return self._cache[key]

    def fallback_for(self, role: str) -> ChatModel | None:
        return fallback_model(self._base, role)


def _routes_elsewhere(spec: Any) -> bool:
    return bool(spec.endpoint or spec.model or spec.base_url)


def with_team(models: RoleModels, team: Sequence[Any] | None) -> RoleModels:
    """The models a debate calls: ``models`` wrapped once in ``TeamModels`` when the config names a
    team (``run_debate`` does this for every protocol, so none can skip it)."""
    if team and not isinstance(models, TeamModels):
        return TeamModels(models, team)
    return models


def cache_key(role: str, agent: int | None) -> str:
    """The prompt family a call belongs to: on a server with KV-cache slots the call asks for its
    prompt to be cached, and the server gives it the slot holding the longest shared prefix.

    Every agent's selection prompt starts with the same role line and the whole pool, so selections
    share one family (the second agent's is then almost entirely cached); each agent's own turns
    form a family (its next turn starts with the same example and, often, the same chosen items);
    calls without an agent (judge, summarizer, moderator) form the panel's.
    """
    if role == "select":
        return "select"
    return "panel" if agent is None else f"agent/{agent}"

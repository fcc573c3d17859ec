"""The protocol registry: one ``ProtocolSpec`` per protocol, the only place a protocol is declared.

Everything else that used to list protocols is derived from it: the config's agent limits, the
single-agent and knowledge-free sets, the settings each protocol honours and the settings models it
declares (``DebateConfig`` gets one field per model from here), which model endpoint plays each
transcript role, and which roles carry an agent's own answer (the budget fallback, the report).

This is the one module of the engine's core that imports protocols, and only their settings models
(pydantic models that import neither the config nor a runner): runners are named and imported on
first use, so the config can read the specs without importing the runners, which import the config.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel

from engine.protocols.mad.settings import MadSettings
from engine.protocols.mallm.settings import MallmSettings

if TYPE_CHECKING:
    from engine.config import DebateConfig
    from engine.outcome import ProtocolRunner

# Settings every protocol honours; ``sequential`` holds in every protocol: those with one call at a
# time (single, mad) satisfy it as is.
COMMON_SETTINGS = frozenset(
    {
        "protocol",
        "temperature",
        "max_tokens",
        "seed",
        "prompt_style",
        "budget_calls",
        "budget_tokens",
        "sequential",
    }
)
# How the pool is built (k_wiki, k_web, search_query) is a setting of every protocol that reads one.
POOL_SETTINGS = frozenset({"knowledge", "k_wiki", "k_web", "search_query"})
# Protocols whose agents select from the pool each round may also search it during the debate.
KNOWLEDGE_SETTINGS = POOL_SETTINGS | {"selection", "max_selected", "debate_search"}

DEBATER, JUDGE, SUMMARIZER = "debater", "judge", "summarizer"  # the configured endpoints
# Roles recorded before any protocol runs, for every protocol that reads a pool: "search" writes the
# passage the pool is searched with (``search_query="passage"``), played by the debaters' endpoint.
SEARCH_ROLE = "search"
# The debater's call that writes a search during the debate (``engine.pool_search``).
QUERY_ROLE = "query"
PRE_DEBATE_ROLES = {SEARCH_ROLE: DEBATER}


@dataclass(frozen=True)
class ProtocolSpec:
    """What the engine, the config and the reports need to know about one protocol.

    ``runner`` is ``"module:function"``; ``roles`` maps each transcript role the protocol records to
    the endpoint that plays it; ``answer_roles`` are the roles whose parsed answer is an agent's own
    answer to the question (not a selection, vote, verdict or summary); ``settings`` are the
    ``DebateConfig`` fields it honours (any other must keep its default). ``max_agents`` None means
    the config's limit; a single-agent protocol has ``min_agents == max_agents == 1``.
    ``settings_model`` is the protocol's own settings (a pydantic model in its folder): ``DebateConfig``
    has a field of that type named after the protocol, which the protocol honours.
    """

    name: str
    runner: str
    roles: Mapping[str, str]
    answer_roles: tuple[str, ...]
    settings: frozenset[str]
    min_agents: int = 2
    max_agents: int | None = None
    uses_pool: bool = True
    # ``"module:function"`` checking a whole ``DebateConfig`` for this protocol (raises ValueError);
    # it lives in the protocol's folder with its settings.
    check: str | None = None
    settings_model: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        if self.settings_model is not None:
            # The protocol's own settings field is one it honours (a frozen dataclass: set it once here).
            object.__setattr__(self, "settings", self.settings | {self.name})
        unknown = set(self.answer_roles) - set(self.roles)
        if unknown:
            raise ValueError(
                f"protocol {self.name!r}: answer roles {sorted(unknown)} are not among its roles"
            )

    def load_check(self) -> Callable[[DebateConfig], None]:
        """The protocol's config check, imported on first use (the config cannot import protocols
        before it exists)."""
        assert self.check is not None
        module, _, function = self.check.partition(":")
        return cast("Callable[[DebateConfig], None]", getattr(importlib.import_module(module), function))

    def load_runner(self) -> ProtocolRunner:
        """The protocol's runner, imported now (the first debate with this protocol pays for it)."""
        module, _, function = self.runner.partition(":")
        return cast("ProtocolRunner", getattr(importlib.import_module(module), function))

    @property
    def single_agent(self) -> bool:
        return self.max_agents == 1


_SELECT = {"select": DEBATER, QUERY_ROLE: DEBATER}


def _baseline(
    name: str, role: str = "answer", settings: frozenset[str] = frozenset(), *, uses_pool: bool = False
) -> ProtocolSpec:
    """A single-agent baseline of the MADKE paper (§4.2): one agent, one role, no debate."""
    return ProtocolSpec(
        name=name,
        runner=f"engine.protocols.baselines.runner:run_{name}",
        roles={role: DEBATER},
        answer_roles=(role,),
        settings=COMMON_SETTINGS | settings,
        min_agents=1,
        max_agents=1,
        uses_pool=uses_pool,
    )


SPECS: tuple[ProtocolSpec, ...] = (
    ProtocolSpec(
        name="madke",
        runner="engine.protocols.madke.runner:run_madke",
        roles={**_SELECT, "debater": DEBATER, "judge": JUDGE, "summarizer": SUMMARIZER},
        answer_roles=("debater",),
        settings=COMMON_SETTINGS | KNOWLEDGE_SETTINGS | {"agents", "rounds", "judge", "team", "ordering"},
    ),
    _baseline("single"),
    _baseline("cot"),
    _baseline("self_consistency", "sample", frozenset({"samples"})),
    _baseline("rag", settings=POOL_SETTINGS, uses_pool=True),
    ProtocolSpec(
        name="society",
        runner="engine.protocols.society.runner:run_society",
        roles={**_SELECT, "debater": DEBATER},
        answer_roles=("debater",),
        settings=COMMON_SETTINGS
        | KNOWLEDGE_SETTINGS
        | {"agents", "rounds", "team", "ordering", "confidence", "speaking_order"},
    ),
    ProtocolSpec(
        name="mad",
        runner="engine.protocols.mad.runner:run_mad",
        roles={**_SELECT, "affirmative": DEBATER, "negative": DEBATER, "moderator": JUDGE, "judge": JUDGE},
        answer_roles=("affirmative", "negative"),
        settings=COMMON_SETTINGS | KNOWLEDGE_SETTINGS | {"agents", "rounds", "team", "reasks"},
        min_agents=2,
        max_agents=2,
        settings_model=MadSettings,
    ),
    ProtocolSpec(
        name="mallm",
        runner="engine.protocols.mallm.runner:run_mallm",
        roles={**_SELECT, "debater": DEBATER, "extract": DEBATER, "vote": DEBATER},
        answer_roles=("debater",),
        settings=COMMON_SETTINGS
        | KNOWLEDGE_SETTINGS
        | {"agents", "rounds", "team", "ordering", "speaking_order", "reasks"},
        settings_model=MallmSettings,
    ),
    ProtocolSpec(
        name="kks",
        runner="engine.protocols.kks.runner:run_kks",
        roles={"propose": DEBATER, "debater": DEBATER, "adjust": DEBATER},
        answer_roles=("propose", "debater", "adjust"),
        settings=COMMON_SETTINGS
        | {"agents", "team", "ordering", "confidence", "speaking_order", "depth", "reasks"},
        uses_pool=False,
    ),
)

PROTOCOLS: dict[str, ProtocolSpec] = {spec.name: spec for spec in SPECS}


def spec_for(name: str) -> ProtocolSpec:
    """The spec of protocol ``name``; an unknown name is an error, never a default."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"protocol: unknown protocol {name!r}") from None


def settings_models() -> dict[str, type[BaseModel]]:
    """Each protocol's own settings model by protocol name, in the registry's order (``DebateConfig``
    gives each a field of that name, at one place in its schema)."""
    return {spec.name: spec.settings_model for spec in SPECS if spec.settings_model is not None}


def role_endpoints() -> dict[str, str]:
    """Which configured endpoint plays each transcript role, over all protocols (and the roles
    recorded before a protocol runs, ``PRE_DEBATE_ROLES``).

    A role name means the same endpoint in every protocol that records it (checked here), so the map
    is one table however many protocols share a role.
    """
    merged: dict[str, str] = dict(PRE_DEBATE_ROLES)
    for spec in SPECS:
        for role, endpoint in spec.roles.items():
            if merged.setdefault(role, endpoint) != endpoint:
                raise ValueError(f"role {role!r} is played by {merged[role]!r} and {endpoint!r}")
    return merged


def answer_roles() -> frozenset[str]:
    """Every role, in any protocol, whose answer is an agent's own answer to the question."""
    return frozenset(role for spec in SPECS for role in spec.answer_roles)

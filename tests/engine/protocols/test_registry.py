"""The protocol registry is the one list of protocols: everything that names protocols derives from it."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import get_args

import pytest

from engine import config, models, registry
from engine.config import DebateConfig
from engine.registry import PROTOCOLS, SPECS, ProtocolSpec, answer_roles, spec_for
from engine.styles import STYLE_NAMES, ByStyle

pytestmark = pytest.mark.unit

ENGINE = Path(importlib.import_module("engine").__file__ or "").parent


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_spec_names_a_runner_and_prompts_for_every_style(spec: ProtocolSpec) -> None:
    assert inspect.iscoroutinefunction(spec.load_runner())
    package = spec.runner.partition(":")[0].rsplit(".", 1)[0]
    prompts_for = importlib.import_module(package).prompts_for
    assert isinstance(prompts_for, ByStyle)
    assert all(prompts_for(style) is not None for style in STYLE_NAMES)
    with pytest.raises(ValueError, match="unknown prompt style"):
        prompts_for("shouty")


def test_the_config_offers_exactly_the_registered_protocols() -> None:
    schema = DebateConfig.model_json_schema()["properties"]["protocol"]
    assert schema["enum"] == list(PROTOCOLS) == [s.name for s in SPECS]
    assert get_args(config.PromptStyle) == STYLE_NAMES
    assert set(config.HONOURED) == set(PROTOCOLS)


def test_derived_sets() -> None:
    assert {"single", "cot", "self_consistency", "rag"} == config.SINGLE_AGENT_PROTOCOLS
    assert {"single", "cot", "self_consistency", "kks"} == config.KNOWLEDGE_FREE
    assert answer_roles() == {"debater", "answer", "sample", "affirmative", "negative", "propose", "adjust"}
    all_roles = set(registry.role_endpoints())
    assert all_roles - answer_roles() == {
        "select",
        "judge",
        "summarizer",
        "moderator",
        "vote",
        "extract",
        "search",  # the search passage, written before any protocol runs (registry.PRE_DEBATE_ROLES)
        "query",  # a search a debater writes during the debate (engine.pool_search)
    }
    assert registry.role_endpoints()["search"] == registry.DEBATER == registry.role_endpoints()["query"]
    assert DebateConfig(protocol="kks", knowledge="all").needs_pool is False
    assert DebateConfig(protocol="rag").needs_pool is True


def test_agent_limits_come_from_the_spec() -> None:
    with pytest.raises(ValueError, match="protocol 'society' needs at least 2 agents"):
        DebateConfig(protocol="society", agents=1)
    with pytest.raises(ValueError, match=r"protocol 'mad' has exactly 2 debaters \(affirmative, negative\)"):
        DebateConfig(protocol="mad", agents=3)
    assert DebateConfig(protocol="single", agents=1).agents == 1


def test_unknown_names_raise_instead_of_falling_back() -> None:
    with pytest.raises(ValueError, match="not declared by any protocol"):
        models.endpoint_for("narrator")
    with pytest.raises(ValueError, match="unknown protocol"):
        spec_for("chess")
    with pytest.raises(ValueError, match="not among its roles"):
        ProtocolSpec("x", "m:f", roles={"debater": "debater"}, answer_roles=("vote",), settings=frozenset())


def test_a_role_is_played_by_one_endpoint_in_every_protocol() -> None:
    endpoints = registry.role_endpoints()
    for spec in SPECS:
        assert {role: endpoints[role] for role in spec.roles} == dict(spec.roles)


def test_no_runner_tests_the_prompt_style() -> None:
    """Styles differ only in their implementations (``paper.py``, ``robust.py``), chosen by ``ByStyle``."""
    found = [
        f"{path.relative_to(ENGINE)}:{n}"
        for path in sorted(ENGINE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"style\s*[!=]=\s*['\"]", line)
    ]
    assert found == []

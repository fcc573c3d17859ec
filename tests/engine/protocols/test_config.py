"""Protocol settings at the edge: validation errors name the field; truth_last needs gold answers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.schemas import DebateRequest
from engine.config import DebateConfig

pytestmark = pytest.mark.unit


def test_api_refuses_truth_last_without_answers() -> None:
    with pytest.raises(ValidationError, match="ordering"):
        DebateRequest(
            question="Capital of France?", config=DebateConfig(protocol="society", ordering="truth_last")
        )
    ok = DebateRequest(
        question="Capital of France?",
        config=DebateConfig(protocol="society", ordering="truth_last"),
        answers=["Paris"],
    )
    assert ok.config.requires_gold


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"protocol": "society", "rounds": 0}, "rounds"),
        ({"protocol": "society", "ordering": "sorted"}, "ordering"),
        ({"protocol": "society", "speaking_order": "loudest"}, "speaking_order"),
        (
            {"protocol": "mallm", "mallm": {"decision": "unanimity", "paradigm": "collective_improvement"}},
            "paradigm",
        ),
        ({"protocol": "mallm", "mallm": {"decision": "plurality"}}, "decision"),
        ({"protocol": "mallm", "mallm": {"threshold_rule": "=>"}}, "threshold_rule"),
        ({"protocol": "society", "agents": 1}, "agents"),
        ({"protocol": "society", "team": [{"base_url": "ftp://x"}, {}]}, "base_url"),
        ({"protocol": "society", "team": [{"api_key": "sk-123"}, {}]}, "api_key"),
        ({"protocol": "kks", "depth": 0}, "depth"),
        ({"protocol": "society", "reasks": 9}, "reasks"),
    ],
)
def test_invalid_settings_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        DebateConfig.model_validate(fields)


def test_agent_temperature_falls_back_to_the_debate_temperature() -> None:
    cfg = DebateConfig(protocol="society", temperature=0.7, team=[{"temperature": 0.0}, {}])
    assert cfg.agent_temperature(0) == 0.0 and cfg.agent_temperature(1) == 0.7

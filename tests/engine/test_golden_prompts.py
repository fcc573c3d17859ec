"""Every prompt of every protocol renders byte for byte as the golden record says, in both styles."""

from __future__ import annotations

import json

import pytest

from tests.engine.golden_prompts import GOLDEN, render_all

pytestmark = pytest.mark.unit


def test_every_prompt_renders_as_recorded() -> None:
    recorded = json.loads(GOLDEN.read_text())
    # A round trip through JSON, so tuples and lists compare alike.
    rendered = json.loads(json.dumps(render_all()))
    assert sorted(rendered) == sorted(recorded)
    for key, value in recorded.items():
        assert rendered[key] == value, key

"""The gateway's preset models are the evaluation presets, as data (``api/preset_models.json``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_gateway_copy_of_the_presets_is_current() -> None:
    module = load_script("preset_models")
    current = (ROOT / "api" / "preset_models.json").read_text(encoding="utf-8")
    assert current == module.render(), "run .venv/bin/python scripts/preset_models.py"

"""The gateway's preset models are the evaluation presets, as data (``api/preset_models.json``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_gateway_copy_of_the_presets_is_current() -> None:
    spec = importlib.util.spec_from_file_location("preset_models", ROOT / "scripts" / "preset_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = (ROOT / "api" / "preset_models.json").read_text(encoding="utf-8")
    assert current == module.render(), "run .venv/bin/python scripts/preset_models.py"

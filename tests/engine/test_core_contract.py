"""The import-linter contract that keeps the engine's core off the protocols lists every core module."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import pytest

import engine

pytestmark = pytest.mark.unit
CONTRACT = "the engine's core (every engine module outside engine.protocols but the registry)"


def test_the_core_contract_names_every_core_module() -> None:
    # A new core module that the contract did not list could import a protocol unseen.
    pyproject = tomllib.loads((Path(engine.__file__).parent.parent / "pyproject.toml").read_text())
    (contract,) = [
        c for c in pyproject["tool"]["importlinter"]["contracts"] if c["name"].startswith(CONTRACT)
    ]
    core = {
        f"engine.{m.name}"
        for m in pkgutil.iter_modules(engine.__path__)
        if m.name not in {"protocols", "registry"}
    }
    assert set(contract["source_modules"]) == core

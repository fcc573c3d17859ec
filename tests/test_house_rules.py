"""The house rules the layout keeps: every top-level package says its purpose in its ``__init__``
docstring, and no module of the product or the benchmarks grows past 500 lines without saying why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "api", "bench", "debate_worker", "engine", "evaluation", "inprocess", "parley_cli", "parley_client",
    "parley_testing", "parley_wire", "retriever", "services",
)  # fmt: skip
MAX_LINES = 500
# A module that must stay longer says so in its docstring with this phrase and its reason.
LONG_REASON = "longer than 500 lines because"


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


@pytest.mark.unit
@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_states_its_purpose(package: str) -> None:
    first = _docstring(ROOT / package / "__init__.py").split(". ")[0]
    assert len(first.split()) >= 6, (
        f"{package}/__init__.py: its docstring's first sentence says what it is for"
    )


@pytest.mark.unit
def test_no_module_over_500_lines_without_a_reason() -> None:
    long = [
        f"{path.relative_to(ROOT)} ({lines} lines)"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
        and LONG_REASON not in _docstring(path)
    ]
    assert long == []

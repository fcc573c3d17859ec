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


# The product packages, where an import inside a function needs a reason (the benchmarks and the test
# helpers are scripts and fixtures, read top to bottom).
PRODUCT = (
    "api", "debate_worker", "engine", "evaluation", "inprocess", "parley_cli", "parley_client",
    "parley_wire", "retriever", "services",
)  # fmt: skip


def _uncommented_local_imports(path: Path) -> list[str]:
    """Imports inside a function body with no comment saying why: none on the import's line, none on
    the line above, and none above the block of consecutive imports it belongs to."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: dict[int, ast.Import | ast.ImportFrom] = {}
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Import | ast.ImportFrom):
                    found[sub.lineno] = sub
    ends = {sub.end_lineno: sub for sub in found.values()}
    bare = []
    for line in sorted(found):
        above = line - 1
        # Up through the block of imports this one belongs to (isort's blank line between groups
        # included): the comment above the block covers all of it.
        while above in ends or (above - 1 in ends and not lines[above - 1].strip()):
            above = ends[above if above in ends else above - 1].lineno - 1
        said = "#" in lines[line - 1] or (line >= 2 and "#" in lines[line - 2])
        if not said and not (above >= 1 and "#" in lines[above - 1]):
            bare.append(f"{path.relative_to(ROOT)}:{line}: {lines[line - 1].strip()}")
    return bare


@pytest.mark.unit
def test_function_local_imports_say_why() -> None:
    """No import circles, and an import inside a function only where a heavy or optional dependency
    must stay lazy (or `parley --help` must stay fast): a comment on its line or just above says so."""
    bare = [
        entry
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for entry in _uncommented_local_imports(path)
    ]
    assert bare == [], "move these to the module's imports, or say why they stay local:\n" + "\n".join(bare)

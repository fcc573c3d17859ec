"""Imports run one way: no package imports the command root, another package's CLI, or the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "api",
    "retriever",
    "engine",
    "evaluation",
    "inprocess",
    "debate_worker",
    "services",
    "parley_client",
    "parley_testing",
)
# Each package's command-line module: only the root (parley_cli) assembles them.
CLI_MODULES = {
    "api.cli",
    "debate_worker.worker_cli",
    "inprocess.ask_cli",
    "evaluation.kks.cli",
    "evaluation.cli",
    "retriever.cli",
}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def offending_imports(path: Path, package: str) -> list[str]:
    """What ``path`` (in ``package``) imports that it must not."""
    return [
        name
        for name in sorted(imported_modules(path))
        if name.split(".")[0] in ("parley_cli", "tests", "bench")
        or (name in CLI_MODULES and name.split(".")[0] != package)
    ]


def test_no_package_imports_the_root_another_cli_or_the_tests() -> None:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            bad = offending_imports(path, package)
            if bad:
                found[str(rel)] = bad
    assert found == {}


def test_benchmarks_import_no_test_code() -> None:
    found = {}
    for path in sorted((ROOT / "bench").rglob("*.py")):
        bad = [name for name in imported_modules(path) if name.split(".")[0] == "tests"]
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert found == {}


def test_the_check_sees_a_cross_package_cli_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from api.cli import app\nimport tests.support\nfrom engine import config\n")
    assert offending_imports(module, "debate_worker") == ["api.cli", "tests.support"]
    assert offending_imports(module, "api") == ["tests.support"]

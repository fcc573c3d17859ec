"""README.md stays a quickstart and a map of the docs: the two set-up commands first, under 350 lines,
every page of docs/ reachable from it (directly or through docs/index.md)."""

from __future__ import annotations

import re

import pytest

from tests.docs.pages import ROOT

pytestmark = pytest.mark.unit

README = (ROOT / "README.md").read_text()


def test_readme_is_under_350_lines() -> None:
    lines = README.count("\n")
    assert lines < 350, f"README.md has {lines} lines: move detail into docs/ and link it"


def test_quickstart_is_the_first_section() -> None:
    sections = re.findall(r"^## (.+)$", README, re.M)
    assert sections[0] == "Quickstart"


def test_readme_links_the_docs_index() -> None:
    assert "(docs/index.md)" in README

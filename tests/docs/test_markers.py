"""Every shell and Python snippet of README.md and docs/*.md says how it is tested (the convention is
in ``tests/docs/pages.py``): run live here, run by a named test module, or not run for a stated reason.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.docs.pages import ROOT, snippets

pytestmark = pytest.mark.unit


def test_every_snippet_is_marked() -> None:
    unmarked = [b.where for b in snippets() if b.marker is None]
    assert unmarked == [], "add <!-- snippet: live | tested-by PATH | not-run (reason) --> before each"


def test_tested_by_names_a_test_module_that_reads_the_page() -> None:
    for block in snippets():
        if block.marker and block.marker.startswith("tested-by"):
            module = ROOT / block.marker.split(maxsplit=1)[1]
            assert module.is_file(), block.where
            assert block.page.name in module.read_text(encoding="utf-8"), block.where


def test_not_run_says_why() -> None:
    for block in snippets():
        if block.marker == "not-run":
            assert block.reason and len(block.reason.strip()) >= 8, block.where


def summary() -> Counter[str]:
    """Snippets by how they are tested (``python -m tests.docs.test_markers`` prints it)."""
    return Counter(f"not-run ({b.reason})" if b.marker == "not-run" else str(b.marker) for b in snippets())


if __name__ == "__main__":
    for key, n in sorted(summary().items(), key=lambda kv: -kv[1]):
        print(f"{n:3d}  {key}")

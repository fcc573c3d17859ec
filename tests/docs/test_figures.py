"""The measured figures quoted in the README and the docs are those their reports hold: every
``<!-- figures: … -->`` block is what scripts/doc_figures.py renders from its report now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_script

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]


def test_every_figures_block_matches_its_report() -> None:
    figures = load_script("doc_figures")
    assert figures.main(["--check"]) == 0, "run .venv/bin/python scripts/doc_figures.py"
    names = set()
    for name in figures.FILES:
        names |= {m.group("name") for m in figures.BLOCK.finditer((ROOT / name).read_text(encoding="utf-8"))}
    assert names == set(figures.BLOCKS), "a block no file uses, or a file with an unknown block"


def test_a_changed_report_makes_the_block_stale(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    figures = load_script("doc_figures")
    suite = json.loads((ROOT / "reports/evidence/suite.json").read_text(encoding="utf-8"))
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert figures.rendered(text, "README.md") == text
    for run in suite["runs"]:
        if run["label"] == "madke":
            run["accuracy"] = 0.9
    fake = tmp_path / "reports" / "evidence"
    fake.mkdir(parents=True)
    (fake / "suite.json").write_text(json.dumps(suite), encoding="utf-8")
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    changed = figures.rendered(text, "README.md")
    assert "MADKE answered 90.0 %" in changed and changed != text
    with pytest.raises(SystemExit, match="unknown figures block"):
        figures.rendered("<!-- figures: nonsense -->\nx\n<!-- /figures -->", "x.md")

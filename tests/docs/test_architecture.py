"""docs/architecture.md against the code: its picture's arrows are the code's imports, there is no
import circle among modules, and every file the "Adding …" sections send a reader to exists."""

from __future__ import annotations

import re

import pytest

from tests.docs.pages import ROOT
from tests.support.scripts import load_script

pytestmark = pytest.mark.unit
PAGE = ROOT / "docs" / "architecture.md"
CODE_PATH = re.compile(r"`([A-Za-z0-9_<>./-]+\.(?:py|txt|json|toml|md))`|`([a-z_]+/[A-Za-z0-9_<>./-]*/?)`")


def adding_sections() -> dict[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    return {p.splitlines()[0]: p for p in parts if p.startswith("Adding ")}


def exists(path: str) -> bool:
    """A path as the page writes it: from the repository root, or inside a protocol's folder (the page
    says `mad/settings.py` and `paper.py` in the protocol section); `<name>` stands for any name."""
    path = path.rstrip("/")
    candidates = [ROOT / path, *(ROOT / "engine" / "protocols").glob(f"*/{path}")]
    candidates += list((ROOT / "engine" / "protocols").glob(path))
    if "<" in path:
        pattern = re.sub(r"<[^>]+>", "*", path)
        return any(ROOT.glob(pattern)) or any(ROOT.glob(pattern.rsplit("/", 1)[0]))
    return any(c.exists() for c in candidates)


def test_the_page_has_a_where_to_add_section_for_each_kind_of_change() -> None:
    assert set(adding_sections()) >= {
        "Adding a protocol",
        "Adding a dataset format",
        "Adding an endpoint",
        "Adding a vector store backend",
        "Adding a model",
    }


def test_every_file_the_adding_sections_name_exists() -> None:
    missing = []
    for title, body in adding_sections().items():
        for match in CODE_PATH.finditer(body):
            path = match.group(1) or match.group(2)
            if not exists(path):
                missing.append(f"{title}: {path}")
    assert missing == []


def test_the_picture_is_drawn_from_the_imports_the_code_has_and_there_is_no_circle() -> None:
    architecture = load_script("architecture")
    data = architecture.house()
    assert architecture.structure_drift(data) is None, "run .venv/bin/python scripts/architecture.py"
    assert data["circles"] == [], f"import circles among modules: {data['circles']}"
    # The layering the import contracts state: nothing points up from the engine or services.
    rows = architecture.layers(data)
    assert rows["services"] > rows["engine"] and rows["parley_wire"] > rows["services"]
    assert (ROOT / "docs" / "img" / "architecture.png").stat().st_size > 10_000

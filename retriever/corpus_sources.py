"""Corpus sources for index builds: a corpus read row by row from a resume position (a byte offset in a
DPR TSV or pyserini JSONL file, a row index in a list), each row with its passages or why it was refused.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from retriever.corpus import Passage, passages_of, wikipedia_url


@dataclass(frozen=True)
class Row:
    """One corpus row: its passages (none when rejected), where the next row starts, and its line."""

    passages: list[Passage]
    position: int
    line: int
    rejected: str | None = None


class CorpusSource(Protocol):
    """A corpus read row by row from a position (a byte offset for files, a row index for lists)."""

    corpus: str
    size: int  # total units of ``position``: bytes of a file, rows of a list
    unit: str
    identity: dict[str, Any]  # what a checkpoint must match to be resumed

    def rows(self, position: int, line: int) -> Iterator[Row]: ...


class ListSource:
    """Passages already in memory (the bundled Vital corpus, tests): one row per passage."""

    unit = "psg"

    def __init__(self, corpus: str, passages: Sequence[Passage]) -> None:
        self.corpus = corpus
        self._passages = passages
        self.size = len(passages)
        self.identity = {"corpus": corpus, "rows": len(passages)}

    def rows(self, position: int, line: int) -> Iterator[Row]:
        for i in range(position, len(self._passages)):
            yield Row([self._passages[i]], i + 1, i + 1)


class FileSource:
    """A DPR TSV (``id  text  title``) or pyserini JSONL file, read in binary so positions are offsets."""

    unit = "B"

    def __init__(
        self, path: Path, *, kind: str, corpus: str, max_words: int, limit: int | None = None
    ) -> None:
        if kind not in ("dpr", "jsonl"):
            raise ValueError(f"unknown corpus format {kind!r}")
        self.path = path
        self.kind = kind
        self.corpus = corpus
        self.max_words = max_words
        self.limit = limit
        self.size = path.stat().st_size
        self.identity = {"corpus": corpus, "file": str(path.resolve()), "bytes": self.size, "kind": kind}

    def rows(self, position: int, line: int) -> Iterator[Row]:
        csv.field_size_limit(sys.maxsize)
        parse = self._dpr_row if self.kind == "dpr" else self._jsonl_row
        taken = 0
        with self.path.open("rb") as fh:
            fh.seek(position)
            for raw in iter(fh.readline, b""):
                position += len(raw)
                line += 1
                if not raw.strip():
                    continue
                if self.limit is not None and taken >= self.limit:
                    return
                taken += 1
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    yield Row([], position, line, "not UTF-8")
                    continue
                passages, why = parse(text)
                yield Row(passages, position, line, why)

    def _dpr_row(self, text: str) -> tuple[list[Passage], str | None]:
        row = next(csv.reader(io.StringIO(text), delimiter="\t"), [])
        if row[:1] == ["id"]:
            return [], None  # the header
        if len(row) != 3:
            return [], f"expected 3 tab-separated columns (id, text, title), found {len(row)}"
        doc_id, body, title = row[0].strip(), row[1].strip().strip('"'), row[2].strip()
        if not doc_id or not body:
            return [], "empty id or text"
        return list(passages_of(self.corpus, doc_id, title, body, wikipedia_url(title), self.max_words)), None

    def _jsonl_row(self, text: str) -> tuple[list[Passage], str | None]:
        try:
            rec = json.loads(text)
        except ValueError as exc:
            return [], f"not JSON ({exc.args[0][:80]})"
        if not isinstance(rec, dict) or rec.get("id") in (None, ""):
            return [], "not an object with an id"
        contents = rec.get("contents") or rec.get("text")
        if not isinstance(contents, str) or not contents.strip():
            return [], "no contents"
        title = rec.get("title")
        if title is None and "\n" in contents:
            title, contents = contents.split("\n", 1)
        title = str(title or "").strip()
        url = rec.get("url") if isinstance(rec.get("url"), str) else (wikipedia_url(title) if title else None)
        return list(
            passages_of(self.corpus, str(rec["id"]), title, contents.strip(), url, self.max_words)
        ), None

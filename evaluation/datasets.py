"""Evaluation datasets: JSONL files or JSON arrays turned into ``Item``s, one loader per format.

Formats (``LOADERS``), autodetected from the fields of the first well-formed record:

- ``nq``: ``{"question", "answers": [...]}`` (or ``"answer": "..."``), generative QA, best over aliases;
- ``fever``: ``{"claim", "label": "SUPPORTS"|"REFUTES"|"NOT ENOUGH INFO"}``;
- ``mc``: MMLU-style ``{"question", "choices": [...], "answer": "B"|1}`` (also ``options``, ``A``-``D``
  fields, or ``(A) …`` lines inside the question, with answers such as ``"(B) Cranial"``);
- ``kks``: Knight–Knave–Spy puzzles, Parley's ``{"question"|"puzzle", "solution": {player: role}}`` or
  ControlMAD's ``{"text_game", "text_solution", "raw_solution"}`` (Wu et al.'s published files);
- ``madke``: MADKE's evaluation files, ``{"question", "answer": [...], "wiki_retrieval": [...],
  "google_retrieval": [...]}``; the precomputed pools travel with the item (``Item.pool``); the kind
  (QA, FEVER, multiple choice) follows from the answers;
- ``ciar``: counter-intuitive arithmetic (Liang et al.), ``{"question", "answer": [...],
  "incorrect answer": [...]}``, scored by numeric equivalence (``numeric`` is the same loader for any
  file of numeric answers).

A file is either JSON lines or one JSON array of records (told by its first character). A malformed
record is never dropped silently: it becomes a ``DatasetProblem`` with its line number (and its array
index in a JSON array), and ``on_error="fail"`` turns the first one into a ``DatasetError``.

This module reads files and tells their format; the loaders live by family (``question_formats``:
nq, fever, mc, numeric; ``kks_format``; ``madke_format``) and the ``Item`` they return in ``items``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from evaluation.items import DatasetError, DatasetProblem, Item, LineError, Loader, OnError
from evaluation.kks_format import load_kks
from evaluation.madke_format import POOL_FIELDS, load_madke
from evaluation.question_formats import load_fever, load_mc, load_nq, load_numeric

LOADERS: dict[str, Loader] = {
    "nq": load_nq,
    "fever": load_fever,
    "mc": load_mc,
    "kks": load_kks,
    "madke": load_madke,
    "ciar": load_numeric,
    "numeric": load_numeric,
}
DatasetFormat = Literal["auto", "nq", "fever", "mc", "kks", "madke", "ciar", "numeric"]


def detect_format(record: dict[str, Any]) -> str:
    """Guess the format from one record's fields; the most specific field wins."""
    if "solution" in record or "text_game" in record:
        return "kks"
    if any(field in record for field, _ in POOL_FIELDS):
        return "madke"
    if "incorrect answer" in record:
        return "ciar"
    if "choices" in record or "options" in record or all(k in record for k in "ABCD"):
        return "mc"
    if "label" in record or "claim" in record:
        return "fever"
    if "question" in record and ("answers" in record or "answer" in record):
        return "nq"
    raise DatasetError(f"cannot tell the dataset format from fields {sorted(record)}; pass --format")


@dataclass
class Dataset:
    path: Path
    format: str
    items: list[Item]
    problems: list[DatasetProblem]
    layout: Literal["jsonl", "json-array"] = "jsonl"

    @property
    def pool_items_dropped(self) -> int:
        """Pool entries published without text, dropped from the items' own pools."""
        return sum(int(it.meta.get("pool_dropped", 0)) for it in self.items)

    @property
    def items_with_pools(self) -> int:
        return sum(1 for it in self.items if it.pool is not None)


@dataclass(frozen=True)
class RawRecord:
    """One record as read from the file, before any format is applied."""

    line: int
    index: int | None
    value: Any = None
    error: str | None = None


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def read_json_array(text: str) -> Iterator[RawRecord]:
    """The elements of a JSON array with the line each starts on (for problem reports). A syntax
    error ends the file: nothing after it can be located reliably."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")
    pos = ws.match(text, 0).end()  # type: ignore[union-attr]
    if text[pos : pos + 1] != "[":
        yield RawRecord(_line_of(text, pos), None, error="expected a JSON array")
        return
    pos = ws.match(text, pos + 1).end()  # type: ignore[union-attr]
    if text[pos : pos + 1] == "]":
        return
    index = 0
    while True:
        line = _line_of(text, pos)
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield RawRecord(
                _line_of(text, exc.pos),
                index,
                error=f"invalid JSON ({exc.msg}); the rest of the file is unread",
            )
            return
        yield RawRecord(line, index, value)
        index += 1
        pos = ws.match(text, end).end()  # type: ignore[union-attr]
        if text[pos : pos + 1] == ",":
            pos = ws.match(text, pos + 1).end()  # type: ignore[union-attr]
            continue
        if text[pos : pos + 1] == "]":
            return
        yield RawRecord(
            _line_of(text, pos),
            index,
            error="invalid JSON (expected ',' or ']'); the rest of the file is unread",
        )
        return


def read_jsonl(handle: Iterable[str]) -> Iterator[RawRecord]:
    for lineno, raw in enumerate(handle, start=1):
        if not raw.strip():
            continue
        try:
            yield RawRecord(lineno, None, json.loads(raw))
        except json.JSONDecodeError as exc:
            yield RawRecord(lineno, None, error=f"invalid JSON ({exc.msg} at column {exc.colno})")


def _load_record(rec: RawRecord, detected: str) -> tuple[Item | None, str, str | None]:
    """One record as an item, the format (detected from the first good record when not given), and
    the reason when the record is unusable."""
    if rec.error is not None:
        return None, detected, rec.error
    record = rec.value
    if not isinstance(record, dict):
        return None, detected, f"expected a JSON object, got {type(record).__name__}"
    if not detected:
        try:
            detected = detect_format(record)
        except DatasetError as exc:
            return None, detected, str(exc)
    default_id = f"index-{rec.index}" if rec.index is not None else f"line-{rec.line}"
    try:
        return LOADERS[detected](record, default_id), detected, None
    except LineError as exc:
        return None, detected, f"{exc} ({detected} format)"


class SliceError(DatasetError):
    """A ``--slice`` that is malformed or selects none of the dataset's usable items."""


_SLICE = re.compile(r"^\s*(\d*)\s*:\s*(\d*)\s*(?::\s*(\d*)\s*)?$")


def parse_slice(text: str) -> slice:
    """``START:STOP[:STEP]`` (Python's slice, 0-based, non-negative, STEP ≥ 1) as a ``slice``:
    ``301:562:2`` is every other question from the 302nd to the 562nd."""
    m = _SLICE.match(text)
    if m is None:
        raise SliceError(f"slice {text!r} is not START:STOP[:STEP] (non-negative integers, e.g. 301:562:2)")
    start, stop, step = (int(g) if g else None for g in m.groups())
    if step == 0:
        raise SliceError(f"slice {text!r}: STEP must be at least 1")
    if start is not None and stop is not None and stop <= start:
        raise SliceError(f"slice {text!r} selects nothing: STOP must be above START")
    return slice(start, stop, step)


def load_dataset(
    path: Path,
    *,
    fmt: str = "auto",
    on_error: OnError = "skip",
    limit: int | None = None,
    select: slice | None = None,
) -> Dataset:
    """Read ``path`` (JSON lines, or one JSON array) into items, reporting every bad record with its
    line number (and array index).

    ``select`` (a slice of the good items, in file order) picks a split, such as questions held out
    from tuning; ``limit`` then counts good items of it, so ``--limit 100`` gives 100 questions even if
    a few lines are bad. Duplicate ids are a problem too: results are keyed by id, so a duplicate would
    overwrite another.
    """
    if select is not None:
        # The whole file is read: a slice's positions are among all the good items.
        dataset = load_dataset(path, fmt=fmt, on_error=on_error)
        chosen = dataset.items[select][:limit]
        if not chosen:
            raise SliceError(f"{path}: the slice selects none of its {len(dataset.items)} usable items")
        return replace(dataset, items=chosen)
    if fmt != "auto" and fmt not in LOADERS:
        raise DatasetError(f"unknown dataset format {fmt!r}; known: {', '.join(LOADERS)}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise DatasetError(f"cannot read dataset {path}: {why}") from exc
    is_array = text.lstrip().startswith("[")
    records = read_json_array(text) if is_array else read_jsonl(text.split("\n"))
    items: list[Item] = []
    problems: list[DatasetProblem] = []
    seen: set[str] = set()
    detected = fmt if fmt != "auto" else ""

    def problem(rec: RawRecord, reason: str) -> None:
        p = DatasetProblem(rec.line, reason, rec.index)
        if on_error == "fail":
            raise DatasetError(f"{path}: {p}")
        problems.append(p)

    for rec in records:
        if limit is not None and len(items) >= limit:
            break
        item, detected, reason = _load_record(rec, detected)
        if item is not None and item.id in seen:
            reason = f"duplicate id {item.id!r}"
        if item is None or reason is not None:
            problem(rec, reason or "unreadable record")
            continue
        seen.add(item.id)
        items.append(item.model_copy(update={"line": rec.line, "index": rec.index}))
    if not items:
        raise DatasetError(
            f"{path}: no usable items" + (f" ({len(problems)} bad records)" if problems else "")
        )
    return Dataset(
        path=path,
        format=detected,
        items=items,
        problems=problems,
        layout="json-array" if is_array else "jsonl",
    )

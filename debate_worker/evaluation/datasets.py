"""Evaluation datasets: JSONL files turned into ``Item``s, one loader per format.

Formats (``LOADERS``), autodetected from the fields of the first well-formed line:

- ``nq``: ``{"question", "answers": [...]}`` (or ``"answer": "..."``), generative QA, best over aliases;
- ``fever``: ``{"claim", "label": "SUPPORTS"|"REFUTES"|"NOT ENOUGH INFO"}``;
- ``mc``: MMLU-style ``{"question", "choices": [...], "answer": "B"|1}``;
- ``kks``: Knight–Knave–Spy puzzles ``{"question"|"puzzle", "solution": {player: role}}``.

A malformed line is never dropped silently: it becomes a ``DatasetProblem`` with its line number, and
``on_error="fail"`` turns the first one into a ``DatasetError``.
"""

from __future__ import annotations

import importlib
import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

ItemKind = Literal["qa", "fever", "mc", "kks"]
OnError = Literal["skip", "fail"]

FEVER_LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
CHOICE_LETTERS = string.ascii_uppercase


class Item(BaseModel):
    """One evaluation question. ``answers`` are the gold aliases; ``meta`` holds format-specific data."""

    id: str
    question: str
    answers: list[str] = Field(default_factory=list)
    kind: ItemKind = "qa"
    meta: dict[str, Any] = Field(default_factory=dict)
    line: int = Field(default=0, description="1-based line in the dataset file")


@dataclass(frozen=True)
class DatasetProblem:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


class DatasetError(ValueError):
    """A dataset that cannot be used (unreadable, unknown format, or a bad line with ``on_error=fail``)."""


class LineError(ValueError):
    """Raised by a loader for one line; the caller adds the line number."""


Loader = Callable[[dict[str, Any], str], Item]


def _text(record: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise LineError(f"missing or empty field {' / '.join(repr(k) for k in keys)}")


def load_nq(record: dict[str, Any], default_id: str) -> Item:
    """NQ-open style: a question and a list of acceptable answer strings."""
    question = _text(record, "question")
    raw = record.get("answers", record.get("answer"))
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) and a.strip() for a in raw):
        raise LineError("'answers' must be a non-empty list of non-empty strings")
    return Item(id=str(record.get("id", default_id)), question=question, answers=[a.strip() for a in raw])


def fever_question(claim: str) -> str:
    """The claim as a question the [answer]-format prompts can handle, naming the three labels."""
    return (
        f'Is the following claim supported or refuted by the facts? Claim: "{claim}" '
        "Answer with exactly one of: SUPPORTS, REFUTES, NOT ENOUGH INFO."
    )


def load_fever(record: dict[str, Any], default_id: str) -> Item:
    """FEVER: a claim and one of three labels (underscores and case tolerated in the file)."""
    claim = _text(record, "claim", "question")
    label = str(record.get("label", "")).strip().upper().replace("_", " ")
    if label not in FEVER_LABELS:
        raise LineError(f"'label' must be one of {', '.join(FEVER_LABELS)}, got {record.get('label')!r}")
    return Item(
        id=str(record.get("id", default_id)),
        question=fever_question(claim),
        answers=[label],
        kind="fever",
        meta={"claim": claim},
    )


def mc_question(question: str, choices: list[str]) -> str:
    lines = [question, *(f"({CHOICE_LETTERS[i]}) {c}" for i, c in enumerate(choices))]
    letters = ", ".join(CHOICE_LETTERS[: len(choices)])
    return "\n".join(lines) + f"\nAnswer with the letter of the correct option ({letters})."


def load_mc(record: dict[str, Any], default_id: str) -> Item:
    """Multiple choice: ``choices`` (or ``options``) and the answer as a letter or 0-based index."""
    question = _text(record, "question")
    choices = record.get("choices", record.get("options"))
    if isinstance(choices, dict):  # {"A": "...", "B": "..."}
        choices = [choices[k] for k in sorted(choices)]
    if (
        not isinstance(choices, list)
        or not 2 <= len(choices) <= 26
        or not all(isinstance(c, str) for c in choices)
    ):
        raise LineError("'choices' must be a list of 2 to 26 strings")
    raw = record.get("answer")
    if isinstance(raw, bool):
        raise LineError(f"'answer' must be a letter or an index, got {raw!r}")
    if isinstance(raw, int):
        index = raw
    elif isinstance(raw, str) and len(raw.strip()) == 1 and raw.strip().upper() in CHOICE_LETTERS:
        index = CHOICE_LETTERS.index(raw.strip().upper())
    elif isinstance(raw, str) and raw.strip().isdigit():
        index = int(raw.strip())
    else:
        raise LineError(f"'answer' must be a letter or an index, got {raw!r}")
    if not 0 <= index < len(choices):
        raise LineError(f"'answer' {raw!r} is outside the {len(choices)} choices")
    letter = CHOICE_LETTERS[index]
    return Item(
        id=str(record.get("id", default_id)),
        question=mc_question(question, choices),
        answers=[letter, choices[index]],
        kind="mc",
        meta={"choices": choices, "answer_index": index, "subject": record.get("subject")},
    )


# ---------------------------------------------------------------------------------------------
# KKS (Knight–Knave–Spy) ENTRY POINT — owned jointly with the protocols engineer (debate_worker/kks/).
# The item contract is fixed here: ``meta["solution"]`` is ``{player: role}`` with roles lower-cased
# ("knight", "knave", "spy"), ``answers`` is the solution rendered as "A: knight, B: knave, …" so the
# text metrics still work. If ``debate_worker.kks`` provides ``puzzle_question(record) -> str`` it is
# used to phrase the question from a generated puzzle; otherwise the record's "question"/"puzzle"
# text is used as is. Scoring (Strict/Smooth) is in ``metrics.kks_strict``/``metrics.kks_smooth``.
# ---------------------------------------------------------------------------------------------
def render_solution(solution: dict[str, str]) -> str:
    return ", ".join(f"{player}: {role}" for player, role in solution.items())


def load_kks(record: dict[str, Any], default_id: str) -> Item:
    """Knight–Knave–Spy puzzle with its unique solution ``{player: role}``."""
    solution = record.get("solution")
    if not isinstance(solution, dict) or not solution:
        raise LineError("'solution' must be a non-empty object {player: role}")
    if not all(isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in solution.items()):
        raise LineError("'solution' must map player names to role names")
    solution = {k.strip(): v.strip().lower() for k, v in solution.items()}
    question: str | None = None
    try:
        kks = importlib.import_module("debate_worker.kks")  # the protocols engineer's package

        phrase = getattr(kks, "puzzle_question", None)
        if callable(phrase) and not isinstance(record.get("question"), str):
            question = str(phrase(record))
    except ImportError:
        pass
    if question is None:
        question = _text(record, "question", "puzzle")
    return Item(
        id=str(record.get("id", default_id)),
        question=question,
        answers=[render_solution(solution)],
        kind="kks",
        meta={
            "solution": solution,
            **({"difficulty": record["difficulty"]} if "difficulty" in record else {}),
        },
    )


LOADERS: dict[str, Loader] = {"nq": load_nq, "fever": load_fever, "mc": load_mc, "kks": load_kks}
DatasetFormat = Literal["auto", "nq", "fever", "mc", "kks"]


def detect_format(record: dict[str, Any]) -> str:
    """Guess the format from one record's fields; the most specific field wins."""
    if "solution" in record:
        return "kks"
    if "choices" in record or "options" in record:
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


def load_dataset(
    path: Path,
    *,
    fmt: str = "auto",
    on_error: OnError = "skip",
    limit: int | None = None,
) -> Dataset:
    """Read ``path`` (JSONL) into items, reporting every bad line with its number.

    ``limit`` counts good items, so ``--limit 100`` gives 100 questions even if a few lines are bad.
    Duplicate ids are a problem too: results are keyed by id, so a duplicate would overwrite another.
    """
    if fmt != "auto" and fmt not in LOADERS:
        raise DatasetError(f"unknown dataset format {fmt!r}; known: {', '.join(LOADERS)}")
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from exc
    items: list[Item] = []
    problems: list[DatasetProblem] = []
    seen: set[str] = set()
    detected = fmt if fmt != "auto" else ""

    def problem(line: int, reason: str) -> None:
        p = DatasetProblem(line, reason)
        if on_error == "fail":
            raise DatasetError(f"{path}: {p}")
        problems.append(p)

    with handle:
        for lineno, raw in enumerate(handle, start=1):
            if limit is not None and len(items) >= limit:
                break
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                problem(lineno, f"invalid JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(record, dict):
                problem(lineno, f"expected a JSON object, got {type(record).__name__}")
                continue
            if not detected:
                try:
                    detected = detect_format(record)
                except DatasetError as exc:
                    problem(lineno, str(exc))
                    continue
            try:
                item = LOADERS[detected](record, f"line-{lineno}")
            except LineError as exc:
                problem(lineno, f"{exc} ({detected} format)")
                continue
            if item.id in seen:
                problem(lineno, f"duplicate id {item.id!r}")
                continue
            seen.add(item.id)
            items.append(item.model_copy(update={"line": lineno}))
    if not items:
        raise DatasetError(f"{path}: no usable items" + (f" ({len(problems)} bad lines)" if problems else ""))
    return Dataset(path=path, format=detected, items=items, problems=problems)

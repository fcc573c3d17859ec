"""The question formats: NQ-open (generative QA), FEVER claims, multiple choice (MMLU and the
variants MADKE's files use) and numeric answers (CIAR), each a loader ``(record, default_id) -> Item``."""

from __future__ import annotations

import re
from typing import Any

from evaluation.equivalence import is_numeric
from evaluation.items import CHOICE_LETTERS, FEVER_LABELS, Item, LineError, answer_aliases, text_field


def load_nq(record: dict[str, Any], default_id: str) -> Item:
    """NQ-open style: a question and a list of acceptable answer strings."""
    question = text_field(record, "question")
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
    claim = text_field(record, "claim", "question")
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


_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[).:]\s*(.*\S)\s*$")
_LETTER_ANSWER = re.compile(r"^\s*(?:\(([A-Za-z])\)|([A-Za-z])(?=\s*$|[.:)]))")


def choices_in_question(question: str) -> tuple[str, list[str]] | None:
    """``(stem, options)`` when the question ends with ``(A) …``/``A. …`` lines, as MADKE's MMLU-Med
    files write them; None otherwise. The letters must run A, B, C, … without gaps."""
    lines = question.splitlines()
    first = next((i for i, line in enumerate(lines) if _OPTION_LINE.match(line)), None)
    if first is None:
        return None
    options = []
    for expected, line in zip(CHOICE_LETTERS, lines[first:], strict=False):
        m = _OPTION_LINE.match(line)
        if not m or m.group(1) != expected:
            return None
        options.append(m.group(2).strip())
    if len(options) != len(lines) - first or len(options) < 2:
        return None
    stem = "\n".join(lines[:first]).strip()
    return (stem, options) if stem else None


def _answer_index(raw: Any, choices: list[str]) -> int:
    """The 0-based option an answer names: a letter (``"B"``, ``"(B)"``, ``"(B) Cranial"``), an index
    or an option's exact text."""
    if isinstance(raw, list) and len(raw) == 1:
        raw = raw[0]
    if isinstance(raw, bool):
        raise LineError(f"'answer' must be a letter or an index, got {raw!r}")
    index: int | None = None
    if isinstance(raw, int):
        index = raw
    elif isinstance(raw, str) and raw.strip().isdigit():
        index = int(raw.strip())
    elif isinstance(raw, str):
        m = _LETTER_ANSWER.match(raw)
        letter = (m.group(1) or m.group(2)).upper() if m else ""
        if letter and letter in CHOICE_LETTERS[: len(choices)]:
            index = CHOICE_LETTERS.index(letter)
        elif raw.strip() in choices:
            index = choices.index(raw.strip())
    if index is None:
        raise LineError(f"'answer' must be a letter or an index, got {raw!r}")
    if not 0 <= index < len(choices):
        raise LineError(f"'answer' {raw!r} is outside the {len(choices)} choices")
    return index


def load_mc(record: dict[str, Any], default_id: str) -> Item:
    """Multiple choice: ``choices``/``options`` (a list or ``{"A": …}``), fields ``A``-``D`` (MMLU's
    columns) or option lines inside the question (MADKE's MMLU-Med); the answer as a letter, an
    index or ``"(B) …"``."""
    question = text_field(record, "question")
    choices = record.get("choices", record.get("options"))
    if isinstance(choices, dict):  # {"A": "...", "B": "..."}
        choices = [choices[k] for k in sorted(choices)]
    if choices is None and all(isinstance(record.get(k), str) for k in "ABCD"):
        choices = [record[k] for k in CHOICE_LETTERS if isinstance(record.get(k), str)]
    if choices is None:
        embedded = choices_in_question(question)
        if embedded is not None:
            question, choices = embedded
    if (
        not isinstance(choices, list)
        or not 2 <= len(choices) <= 26
        or not all(isinstance(c, str) for c in choices)
    ):
        raise LineError("'choices' must be a list of 2 to 26 strings")
    raw = record.get("answer", record.get("label"))
    index = _answer_index(raw, choices)
    letter = CHOICE_LETTERS[index]
    return Item(
        id=str(record.get("id", default_id)),
        question=mc_question(question, choices),
        answers=[letter, choices[index]],
        kind="mc",
        meta={"choices": choices, "answer_index": index, "subject": record.get("subject")},
    )


def load_numeric(record: dict[str, Any], default_id: str) -> Item:
    """A question with numeric answers in several equivalent forms (``"1.5"``, ``"3/2"``), scored by
    value (``equivalence.numeric_match``). CIAR's intuitive wrong answer is kept in ``meta``."""
    question = text_field(record, "question")
    aliases = answer_aliases(record.get("answer", record.get("answers")))
    if not any(is_numeric(a) for a in aliases):
        raise LineError(f"'answer' {aliases!r} holds no number (numeric format)")
    meta: dict[str, Any] = {}
    wrong = record.get("incorrect answer")
    if isinstance(wrong, list | str):
        meta["incorrect_answer"] = wrong if isinstance(wrong, list) else [wrong]
    return Item(
        id=str(record.get("id", default_id)), question=question, answers=aliases, kind="math", meta=meta
    )

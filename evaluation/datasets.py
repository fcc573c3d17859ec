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
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from evaluation.equivalence import is_numeric
from evaluation.kks import puzzle_question
from services.knowledge import GivenKnowledge, KnowledgePool, KnowledgeSource, pool_from_items

ItemKind = Literal["qa", "fever", "mc", "kks", "math"]
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
    index: int | None = Field(default=None, description="0-based position in a JSON-array file")
    pool: KnowledgePool | None = Field(
        default=None,
        description="the knowledge pool published with the question (MADKE's files); debates use it "
        "instead of retrieving one, cut to the configuration's k_wiki/k_web",
    )


@dataclass(frozen=True)
class DatasetProblem:
    line: int
    reason: str
    index: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" (array index {self.index})" if self.index is not None else "")
        return f"{where}: {self.reason}"


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


_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[).:]\s*(.*\S)\s*$")
_LETTER_ANSWER = re.compile(r"^\s*(?:\(([A-Za-z])\)|([A-Za-z])(?=\s*$|[.:)]))")


def _choices_in_question(question: str) -> tuple[str, list[str]] | None:
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
    question = _text(record, "question")
    choices = record.get("choices", record.get("options"))
    if isinstance(choices, dict):  # {"A": "...", "B": "..."}
        choices = [choices[k] for k in sorted(choices)]
    if choices is None and all(isinstance(record.get(k), str) for k in "ABCD"):
        choices = [record[k] for k in CHOICE_LETTERS if isinstance(record.get(k), str)]
    if choices is None:
        embedded = _choices_in_question(question)
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


# ---------------------------------------------------------------------------------------------
# KKS (Knight–Knave–Spy) ENTRY POINT — owned jointly with the protocols engineer (evaluation/kks/).
# The item contract is fixed here: ``meta["solution"]`` is ``{player: role}`` with roles lower-cased
# ("knight", "knave", "spy"), ``answers`` is the solution rendered as "A: knight, B: knave, …" so the
# text metrics still work. If ``evaluation.kks`` provides ``puzzle_question(record) -> str`` it is
# used to phrase the question from a generated puzzle; otherwise the record's "question"/"puzzle"
# text is used as is. Scoring (Strict/Smooth) is ``evaluation.kks.score_kks``.
# ---------------------------------------------------------------------------------------------
def render_solution(solution: dict[str, str]) -> str:
    return ", ".join(f"{player}: {role}" for player, role in solution.items())


RAW_ROLES = {1: "knight", 2: "knave", 3: "spy"}  # ControlMAD's raw_solution codes
_SOLUTION_LINE = re.compile(r"^\s*(.+?)\s+is\s+an?\s+(knight|knave|spy)\s*\.?\s*$", re.IGNORECASE)


def load_controlmad_kks(record: dict[str, Any], default_id: str) -> Item:
    """A puzzle of Wu et al.'s published files (haolun-wu/ControlMAD ``groundtruth/<players>.jsonl``).

    ``text_game`` is what debaters see; the solution is read from ``text_solution`` (one
    ``Name is a role.`` line per player) and checked against ``raw_solution`` (1 knight, 2 knave,
    3 spy, in player order), so a file whose two solution fields disagree is reported, not scored."""
    from engine.protocols.kks import players_from_question
    from evaluation.kks.dataset import puzzle_question

    game = _text(record, "text_game")
    players = players_from_question(game)
    if not players:
        raise LineError("'text_game' has no 'Player name:' lines")
    solution: dict[str, str] = {}
    for line in _text(record, "text_solution").splitlines():
        if not line.strip():
            continue
        m = _SOLUTION_LINE.match(line)
        if not m:
            raise LineError(f"'text_solution' line {line.strip()!r} is not 'Name is a role.'")
        solution[m.group(1).strip()] = m.group(2).lower()
    if sorted(solution) != sorted(players):
        raise LineError(
            f"'text_solution' names {', '.join(solution) or 'nobody'}; the game has {', '.join(players)}"
        )
    raw = record.get("raw_solution")
    if raw is not None:
        codes = (
            [RAW_ROLES.get(c) if isinstance(c, int) else None for c in raw] if isinstance(raw, list) else []
        )
        if codes != [solution[p] for p in players]:
            raise LineError("'raw_solution' disagrees with 'text_solution' (1 knight, 2 knave, 3 spy)")
    ordered = {p: solution[p] for p in players}
    game_id = record.get("game_id", record.get("id"))
    size = record.get("num_player", len(players))
    question = puzzle_question({"game": game.strip(), "players": players, "solution": ordered})
    return Item(
        id=str(game_id) if game_id is not None else default_id,
        question=question,
        answers=[render_solution(ordered)],
        kind="kks",
        meta={"solution": ordered, "difficulty": size, "players": players},
    )


def load_kks(record: dict[str, Any], default_id: str) -> Item:
    """Knight–Knave–Spy puzzle with its unique solution ``{player: role}`` (Parley's generator's
    records), or a ControlMAD record (``text_game``)."""
    if "text_game" in record:
        return load_controlmad_kks(record, default_id)
    solution = record.get("solution")
    if not isinstance(solution, dict) or not solution:
        raise LineError("'solution' must be a non-empty object {player: role}")
    if not all(isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in solution.items()):
        raise LineError("'solution' must map player names to role names")
    solution = {k.strip(): v.strip().lower() for k, v in solution.items()}
    # A record without its question text gets the KKS paper's phrasing of its game.
    question = record["question"] if isinstance(record.get("question"), str) else None
    question = _text(record, "question", "puzzle") if question is not None else puzzle_question(record)
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


# ---------------------------------------------------------------------------------------------
# MADKE's evaluation files (FutureForMe/MADKE, data/<dataset>/<split>_all_retrieval_500.json)
# ---------------------------------------------------------------------------------------------
# Pool sources of a MADKE record: the field, the Parley source it fills. MMLU-Med replaced the web
# search by medical textbooks (paper §5.5); those fill the second (web) slot, as in the reference code.
POOL_FIELDS: tuple[tuple[str, KnowledgeSource], ...] = (
    ("wiki_retrieval", "wikipedia"),
    ("google_retrieval", "web"),
    ("textbooks_retrieval", "web"),
)


def given_knowledge(entry: Any, source: KnowledgeSource) -> GivenKnowledge:
    """One precomputed pool entry: ``contents`` is ``Title\ntext`` (a pyserini document); a web
    snippet may carry its own ``title``/``link``. Text may come out empty; the pool drops it."""
    if isinstance(entry, str):
        entry = {"contents": entry}
    if not isinstance(entry, dict):
        return GivenKnowledge(source=source)
    raw = entry.get("contents", entry.get("text"))
    contents = raw if isinstance(raw, str) else ""
    title, sep, text = contents.partition("\n")
    if not sep:  # no title line: the whole contents is the text
        title, text = "", contents
    if isinstance(entry.get("title"), str) and not title:
        title = entry["title"]
    score = entry.get("score")
    url = entry.get("url", entry.get("link"))
    return GivenKnowledge(
        source=source,
        title=title.strip(),
        text=text.strip(),
        url=url if isinstance(url, str) else None,
        score=float(score) if isinstance(score, int | float) and not isinstance(score, bool) else 0.0,
    )


def file_pool(record: dict[str, Any], question: str, item_id: str) -> tuple[KnowledgePool | None, int]:
    """The record's own pool (all entries; runs cut it to k_wiki/k_web) and how many entries had no
    text. None when the record carries no pool fields at all."""
    given: list[GivenKnowledge] = []
    present = False
    for field, source in POOL_FIELDS:
        entries = record.get(field)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise LineError(f"'{field}' must be a list of pool entries")
        present = True
        given.extend(given_knowledge(e, source) for e in entries)
    if not present:
        return None, 0
    return pool_from_items(question, given, pool_id=f"file:{item_id}")


def _aliases(raw: Any) -> list[str]:
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise LineError("'answer' must be a non-empty list of answer strings")
    out = [str(a).strip() for a in raw if isinstance(a, str | int | float) and not isinstance(a, bool)]
    out = [a for a in out if a]
    if len(out) != len(raw):
        raise LineError("'answer' must be a non-empty list of non-empty strings")
    return out


def load_madke(record: dict[str, Any], default_id: str) -> Item:
    """A MADKE record: the question, its ``answer`` aliases and its precomputed pools.

    The kind follows from the answers, as MADKE's files share one layout for every dataset: FEVER
    labels make a FEVER item (the question is the claim), a question with option lines and a letter
    answer an MMLU-Med item, anything else generative QA."""
    question = _text(record, "question")
    raw = record.get("answer", record.get("answers"))
    item_id = str(record.get("id", default_id))
    aliases = _aliases(raw)
    labels = {a.upper().replace("_", " ") for a in aliases}
    if labels <= set(FEVER_LABELS) and len(labels) == 1:
        item = load_fever({"claim": question, "label": labels.pop()}, item_id)
    elif "choices" in record or "options" in record or _choices_in_question(question) is not None:
        item = load_mc({**record, "answer": aliases[0]}, item_id)
    else:
        item = Item(id=item_id, question=question, answers=aliases)
    item = item.model_copy(update={"id": item_id})
    pool, dropped = file_pool(record, item.question, item_id)
    meta = {**item.meta, **({"pool_dropped": dropped} if dropped else {})}
    return item.model_copy(update={"pool": pool, "meta": meta})


# ---------------------------------------------------------------------------------------------
# CIAR (Skytliang/Multi-Agents-Debate, data/CounterintuitiveQA/CIAR.json) and numeric answers
# ---------------------------------------------------------------------------------------------
def load_numeric(record: dict[str, Any], default_id: str) -> Item:
    """A question with numeric answers in several equivalent forms (``"1.5"``, ``"3/2"``), scored by
    value (``equivalence.numeric_match``). CIAR's intuitive wrong answer is kept in ``meta``."""
    question = _text(record, "question")
    aliases = _aliases(record.get("answer", record.get("answers")))
    if not any(is_numeric(a) for a in aliases):
        raise LineError(f"'answer' {aliases!r} holds no number (numeric format)")
    meta: dict[str, Any] = {}
    wrong = record.get("incorrect answer")
    if isinstance(wrong, list | str):
        meta["incorrect_answer"] = wrong if isinstance(wrong, list) else [wrong]
    return Item(
        id=str(record.get("id", default_id)), question=question, answers=aliases, kind="math", meta=meta
    )


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


def load_dataset(
    path: Path,
    *,
    fmt: str = "auto",
    on_error: OnError = "skip",
    limit: int | None = None,
) -> Dataset:
    """Read ``path`` (JSON lines, or one JSON array) into items, reporting every bad record with its
    line number (and array index).

    ``limit`` counts good items, so ``--limit 100`` gives 100 questions even if a few lines are bad.
    Duplicate ids are a problem too: results are keyed by id, so a duplicate would overwrite another.
    """
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

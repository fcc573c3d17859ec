"""An evaluation question (``Item``), what goes wrong reading one (``DatasetProblem``, ``DatasetError``,
``LineError``), and the field readers every format's loader shares."""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from services.knowledge import KnowledgePool

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


def text_field(record: dict[str, Any], *keys: str) -> str:
    """The first of ``keys`` that holds a non-empty string, stripped; a ``LineError`` naming them all
    otherwise (every format reads its question this way)."""
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise LineError(f"missing or empty field {' / '.join(repr(k) for k in keys)}")


def answer_aliases(raw: Any) -> list[str]:
    """A record's gold answers as non-empty strings (one answer or a list; numbers become text): the
    layout MADKE's and CIAR's files share."""
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise LineError("'answer' must be a non-empty list of answer strings")
    out = [str(a).strip() for a in raw if isinstance(a, str | int | float) and not isinstance(a, bool)]
    out = [a for a in out if a]
    if len(out) != len(raw):
        raise LineError("'answer' must be a non-empty list of non-empty strings")
    return out

"""Question files (JSONL, a ``question`` and its gold ``answers`` a line) as the studies read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_questions(path: Path, split: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """The JSONL's questions, each checked for a ``question`` and its ``answers``; ``split`` keeps the
    even or odd lines, ``limit`` the first N of those."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i, row in enumerate(rows):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("answers"), list):
            raise SystemExit(f"{path}:{i + 1}: each line needs a 'question' string and an 'answers' list")
    if split is not None:
        rows = rows[0 if split == "even" else 1 :: 2]
    return rows[:limit] if limit else rows

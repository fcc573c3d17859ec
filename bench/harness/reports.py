"""Writing a study's results: JSON for the figures, Markdown for the reader, and the facts of the run
(the command, the machine, the date) each report carries so it can be reproduced. Standard library
only: the studies run as plain scripts use it too."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def command_line(module: str, argv: Sequence[str] | None = None, *, env: str = "") -> str:
    """``[ENV ]python -m MODULE ARGS``: the command that wrote a report, from ``argv`` (a test's call)
    or this process's arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([*([env] if env else []), f"python -m {module}", *args])


def machine() -> str:
    """The machine in the words the retrieval reports use: architecture, CPUs, Python."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}"


def utc_date() -> str:
    """Now, to the minute, in UTC: when a report was written."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def utc_iso(t: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time to the second: when a measurement was taken."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def write_json(path: Path, data: Any, *, indent: int = 2) -> None:
    """``data`` as indented JSON with a final newline, its folder made if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent) + "\n", encoding="utf-8")


def write_markdown(path: Path, lines: str | Sequence[str]) -> str:
    """The Markdown report (a text, or lines joined with a final newline); returns the text so a study
    can print what it wrote."""
    text = lines if isinstance(lines, str) else "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text


def table_head(*columns: str) -> list[str]:
    """A Markdown table's header row and its separator, one cell per column."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def report_head(title: str, *paragraph: str) -> list[str]:
    """A Markdown report's first lines: its title, then the paragraph that says what was measured and
    how (the command, the machine), each set off by a blank line."""
    return [f"# {title}", "", *paragraph, ""]

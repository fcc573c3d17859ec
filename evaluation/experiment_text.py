"""Reading an experiment file's text: TOML or YAML into data, and where each key stands (its line), so
that an error about any setting can name the line it is on (``evaluation.experiment``)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evaluation.harness import PlanError


class ExperimentError(PlanError):
    """An experiment file that cannot run: what is wrong, the file and the line."""


def parse_text(path: Path, text: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """The file's data and the line of each key path, for TOML (``.toml``) or YAML (``.yaml``/``.yml``)."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExperimentError(f"{path}: not valid TOML: {exc}") from None
        return data, toml_key_lines(text)
    if suffix in (".yaml", ".yml"):
        return _parse_yaml(path, text)
    raise ExperimentError(f"{path}: an experiment file ends in .toml, .yaml or .yml")


def _parse_yaml(path: Path, text: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    try:
        import yaml  # lazy: only YAML experiment files need it (it comes with huggingface-hub)
    except ImportError:
        raise ExperimentError(
            f"{path}: YAML files need PyYAML (pip install pyyaml); TOML needs nothing"
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ExperimentError(f"{path}: not valid YAML: {exc}") from None
    lines: dict[tuple[Any, ...], int] = {}

    def walk(n: Any, prefix: tuple[Any, ...]) -> None:
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                path_ = (*prefix, key.value)
                lines[path_] = key.start_mark.line + 1
                walk(value, path_)
        elif isinstance(n, yaml.SequenceNode):
            for i, value in enumerate(n.value):
                lines[(*prefix, i)] = value.start_mark.line + 1
                walk(value, (*prefix, i))

    if node is not None:
        walk(node, ())
    return data, lines


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_.-]+)\s*=')


def _toml_key(token: str) -> tuple[str, ...]:
    if token[0] in "\"'":
        return (token[1:-1],)
    return tuple(part.strip() for part in token.split("."))


def toml_key_lines(text: str) -> dict[tuple[Any, ...], int]:
    """The line of each table and key of a TOML text, by path (``("runs", 1, "protocols")``). Enough for
    error messages: top-level keys, tables, arrays of tables and their keys (an inline table's inner
    keys point at the line of the key that holds it)."""
    lines: dict[tuple[Any, ...], int] = {}
    counts: dict[tuple[str, ...], int] = {}
    table: tuple[Any, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header is not None:
            name = tuple(part.strip().strip("\"'") for part in header.group(2).split("."))
            if header.group(1) == "[[":
                index = counts.get(name, 0)
                counts[name] = index + 1
                table = (*name, index)
            else:
                table = name
            lines.setdefault(table, number)
            lines.setdefault(table[:1], number)
            continue
        key = _KEY.match(line)
        if key is not None:
            lines.setdefault((*table, *_toml_key(key.group(1))), number)
    return lines


class Locator:
    """Turns a position in the data (a pydantic ``loc``) into "FILE, line N"."""

    def __init__(self, path: Path, lines: dict[tuple[Any, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def line(self, loc: Sequence[Any]) -> int | None:
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return None

    def at(self, loc: Sequence[Any]) -> str:
        number = self.line(loc)
        return f"{self.path}, line {number}" if number is not None else str(self.path)

    def describe(self, exc: ValidationError) -> str:
        problems = []
        for error in exc.errors():
            loc = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
            name = ".".join(map(str, loc)) or "file"
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{self.at(loc)}: {name}: {message}")
        return "invalid experiment file:\n  " + "\n  ".join(problems)

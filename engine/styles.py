"""Prompt styles: the one place a style name is turned into its implementation.

Every protocol keeps one implementation of its prompt interface per style (``paper.py``,
``robust.py``) and names them once in a ``ByStyle`` table; runners then ask the table for the
configured style and never test the style themselves. ``PromptStyle`` is the one list of style
names (the config's field, the OpenAPI enum and ``STYLE_NAMES`` read it); adding a style adds it there
and a field of ``ByStyle`` (checked at import), and mypy names every protocol that has no
implementation for it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Generic, Literal, TypeVar, get_args

PromptStyle = Literal["paper", "robust"]
STYLE_NAMES: tuple[str, ...] = get_args(PromptStyle)

T = TypeVar("T")


@dataclass(frozen=True)
class ByStyle(Generic[T]):
    """One implementation per prompt style, looked up by the configured style's name."""

    paper: T
    robust: T

    def __call__(self, style: str) -> T:
        if style not in STYLE_NAMES:
            raise ValueError(f"unknown prompt style {style!r}")
        found: T = getattr(self, style)
        return found


if tuple(f.name for f in fields(ByStyle)) != STYLE_NAMES:
    raise RuntimeError(f"ByStyle's fields must be the prompt styles {STYLE_NAMES}, in that order")

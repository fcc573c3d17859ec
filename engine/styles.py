"""Prompt styles: the one place a style name is turned into its implementation.

Every protocol keeps one implementation of its prompt interface per style (``paper.py``,
``robust.py``) and names them once in a ``ByStyle`` table; runners then ask the table for the
configured style and never test the style themselves. Adding a style adds a field here, and mypy
names every protocol that has no implementation for it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Generic, TypeVar

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


STYLE_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ByStyle))

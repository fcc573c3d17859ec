"""Assembling prompt text: the helpers every style and protocol prompt module shares.

A protocol's prompts are written once (its ``prompts.py``) over the texts its styles differ in
(``paper.py``, ``robust.py``). Those texts are templates with ``$name`` slots (``string.Template``:
the JSON the prompts ask for keeps its braces as they are), filled by ``fill``; a value put into a
slot is never read as a template again, so a question or a quoted reply cannot fill another slot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from string import Template

from services.chat_model import ChatMessage


def join_blocks(*parts: str) -> str:
    """The non-empty parts as paragraphs (an optional block left empty leaves no blank gap)."""
    return "\n\n".join(p for p in parts if p)


def fill(template: str, **values: object) -> str:
    """``template`` with each ``$name`` slot replaced by ``values[name]`` (a missing one is an error)."""
    return Template(template).substitute(values)


def fill_blocks(templates: tuple[str, ...], **values: object) -> str:
    """Each block template filled, then joined as paragraphs; a block that fills to nothing (an
    optional part such as the knowledge, left empty) leaves no blank gap."""
    return join_blocks(*(fill(t, **values) for t in templates))


def system_user(system: str, user: str) -> list[ChatMessage]:
    """A two-message chat: the role in the system message, the task in the user message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def chat(system: str | None, user: str) -> list[ChatMessage]:
    """``system_user``, or the user message alone where a style's prompt has no system message."""
    return system_user(system, user) if system is not None else [{"role": "user", "content": user}]


def listing(line: str, texts: Sequence[str], quote: Callable[[str], str], *, start: int = 1) -> str:
    """One line per text, ``line`` filled with its number (``$i``, from ``start``) and the text as the
    style quotes it (``$answer``): how a prompt shows the other agents' replies."""
    return "\n".join(fill(line, i=i, answer=quote(t)) for i, t in enumerate(texts, start=start))

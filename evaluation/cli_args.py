"""What ``parley eval``'s options mean beyond their types: comma lists, ``--compare`` pairs, the base
configuration from ``--config`` and ``--set``, the allowed ``--on-error``/``--primary`` values and the
prompt style of runs that name none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from evaluation.scoring import PRIMARY_METRICS
from services.llm import ALIASES, MODELS, LLMSettings


def csv_list(value: str | None) -> list[str]:
    """``a, b,,c`` → ``["a", "b", "c"]``: the comma lists of ``--protocols``, ``--prompt-styles``."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def parse_compare(value: str | None) -> list[tuple[str, str]]:
    """``a:b,c:d`` → [(a, b), (c, d)]; the report gives each pair a paired bootstrap CI of b − a."""
    pairs = []
    for part in csv_list(value):
        a, sep, b = part.partition(":")
        if not sep or not a.strip() or not b.strip():
            raise typer.BadParameter(f"{part!r} is not A:B", param_hint="--compare")
        pairs.append((a.strip(), b.strip()))
    return pairs


def read_config_file(path: str) -> str:
    """A ``--config`` that is not inline JSON names a file; one that cannot be read is said so (an
    inline value is told apart by its bracket, so a long one is never taken for a file name)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise typer.BadParameter(
            f"neither a JSON object nor a readable JSON file: {reason}", param_hint="--config"
        ) from None


def parse_config(config: str | None, sets: list[str] | None) -> dict[str, Any]:
    """Base ``DebateConfig`` fields from a JSON file or inline JSON, then ``--set key=value`` overrides."""
    base: dict[str, Any] = {}
    if config:
        text = config if config.lstrip()[:1] in ("{", "[") else read_config_file(config)
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(
                f"not a JSON file or JSON object: {exc.msg}", param_hint="--config"
            ) from None
        if not isinstance(loaded, dict):
            raise typer.BadParameter("must be a JSON object", param_hint="--config")
        base.update(loaded)
    for item in sets or []:
        key, sep, raw = item.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise typer.BadParameter(f"{item!r} is not key=value (or a.b=value)", param_hint="--set")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        # ``mallm.decision=majority`` sets one field of a protocol's own settings and keeps the others
        # that --config or an earlier --set gave.
        target = base
        for i, part in enumerate(path[:-1]):
            inner = target.setdefault(part, {})
            if not isinstance(inner, dict):
                where = ".".join(path[: i + 1])
                raise typer.BadParameter(f"{item!r}: {where} is {inner!r}, not an object", param_hint="--set")
            target = inner
        target[path[-1]] = value
    return base


def default_prompt_style(setting: str, *, api: bool, llm_overrides: dict[str, Any] | None = None) -> str:
    """The style of runs that name none: ``PARLEY_EVAL_PROMPT_STYLE``, where ``auto`` is the style the
    model answers reliably with. The embedded models (packaged or a local GGUF) read the papers'
    free-text prompts badly (64 % of the 1.5B's debater replies unreadable against 0.5 % robust,
    docs/benchmarks-and-reports.md), so an evaluation at the papers' wording would measure the prompt
    format more than the protocols. An endpoint whose model is one of the packaged models (served by
    ``parley llm serve`` or an evaluation's own server, named by its registry name or an old alias)
    gets robust too: the style follows the model, not where it runs. Any other endpoint, and the
    gateway, keep the papers' wording. ``llm_overrides``: an experiment file's model entry, in place of
    the environment's LLM settings."""
    if setting != "auto":
        return setting

    if api:
        return "paper"
    llm = LLMSettings(**(llm_overrides or {}))
    served = llm.model.strip()
    return "robust" if llm.base_url is None or served in MODELS or served in ALIASES else "paper"


def check_choices(*, on_error: str, primary: str) -> None:
    """Refuse an ``--on-error`` or ``--primary`` outside its choices, naming the option, before any work."""
    if on_error not in ("skip", "fail"):
        raise typer.BadParameter("must be skip or fail", param_hint="--on-error")
    if primary not in PRIMARY_METRICS:
        raise typer.BadParameter(f"must be one of {', '.join(PRIMARY_METRICS)}", param_hint="--primary")

"""Generate ``docs/configuration.md`` from Parley's settings classes, so the reference cannot drift.

Every process reads one frozen pydantic-settings class (``services.settings.ParleySettings`` and its
subclasses). This script imports every module of Parley's packages, walks the subclasses of
``pydantic_settings.BaseSettings`` defined there, and writes one table row per environment variable:
name (prefix + field, nested models joined with the class's ``env_nested_delimiter``), type with its
bounds, default and description. A new settings class or field therefore appears without editing this
script; ``--check`` (and ``tests/test_config_reference.py``) fail until the reference is regenerated.

    .venv/bin/python scripts/config_reference.py --write   # or: make docs
    .venv/bin/python scripts/config_reference.py --check   # exit 1 and name what is missing or stale
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import json
import pkgutil
import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "docs" / "configuration.md"
# The packages whose modules are imported to find settings classes (the ones setuptools installs).
PACKAGES = (
    "api",
    "services",
    "engine",
    "evaluation",
    "debate_worker",
    "retriever",
    "parley_cli",
    "parley_client",
    "parley_testing",
)
GENERATE_COMMAND = ".venv/bin/python scripts/config_reference.py --write"

# Descriptions for fields whose class gives none (``Field(description=...)`` in the code always wins).
# Keys are ``ClassName.field``; an entry for a field that no longer exists is an error, so this table
# cannot keep describing settings that are gone.
DESCRIPTIONS: dict[str, str] = {
    "EndpointOverride.base_url": "OpenAI-compatible base URL for this role; unset = the global one",
    "EndpointOverride.api_key": "bearer token for this role's endpoint; unset = the global one",
    "EndpointOverride.model": "model name for this role; unset = the global one",
    "LLMSettings.api_key": "bearer token sent to the LLM server",
    "LLMSettings.model": "model name sent in requests",
    "LLMSettings.timeout_s": "deadline per call from when its request was sent, then LLMTimeout (not "
    "retried: the server is alive but slow; another replica may take it)",
    "LLMSettings.connect_timeout_s": "connect timeout per call",
    "LLMSettings.max_attempts": "attempts for connection errors, 408, 409, 429 and 5xx (never other 4xx)",
    "LLMSettings.backoff_base_s": "base of the exponential backoff with full jitter; Retry-After wins",
    "LLMSettings.backoff_max_s": "cap of the exponential backoff",
    "LLMSettings.max_tokens": "completion limit per call",
    "LLMSettings.debater": "per-role endpoint for debaters (and their selection and vote calls)",
    "LLMSettings.judge": "per-role endpoint for the judge and the moderator",
    "LLMSettings.summarizer": "per-role endpoint for the summarizer",
    "LLMSettings.embedded_model": "embedded model when base_url is unset: a packaged one (`parley models`; "
    "qwen2.5-coder-0.5b is the tests') or the path of a .gguf chat model, its header checked first",
    "LLMSettings.embedded_threads": "llama.cpp threads of the embedded server; unset = all cores",
    "LLMSettings.embedded_ctx": "context window of the embedded server",
    "LLMSettings.cache_dir": "where the embedded GGUF is assembled (once, sha256-checked) and its log kept",
    "RetrieverClientSettings.client_timeout_s": "HTTP timeout of calls to the retrieval service",
    "RetrieverClientSettings.client_max_attempts": "attempts for connection errors, timeouts and 5xx",
    "ApiSettings.host": "bind address of `parley api`",
    "ApiSettings.port": "port of `parley api`",
    "ApiSettings.key_prefix": "prefix of every Redis key (share one Redis between deployments)",
    "ApiSettings.keys": "JSON object name → sha256 hex of the key (`parley hash-key KEY`); empty = no auth",
    "ApiSettings.max_batch_items": "items per batch (more: 422)",
    "ApiSettings.idempotency_ttl_s": "how long an Idempotency-Key replays its first response",
    "ApiSettings.sse_ping_s": "SSE keep-alive comment interval",
    "ApiSettings.sse_block_ms": "Redis blocking-read slice of the SSE stream",
    "ApiSettings.redis_timeout_s": "Redis connect timeout (fail fast → 503)",
    "ClientSettings.url": "API base URL of `parley submit`, `parley mcp` and the Python client",
    "ClientSettings.key": "bearer key the clients send",
    "ClientSettings.client_timeout_s": "HTTP timeout of the clients",
    "WorkerSettings.key_prefix": "prefix of every Redis key; must match the API's",
    "WorkerSettings.queues": "queues this worker consumes (JSON list)",
    "WorkerSettings.max_attempts": "deliveries of one job before it fails (a worker lost each time)",
    "WorkerSettings.lease_ttl_s": "lease that keeps two deliveries of a job from running at once",
    "WorkerSettings.pool_timeout_s": "time budget for building one knowledge pool",
    "WorkerSettings.sweep_interval_s": "how often one worker requeues (or, at max_attempts, fails) jobs "
    "whose worker vanished; 0 = no sweep",
    "WorkerSettings.task_acks_late": "Celery: acknowledge after the debate, not before",
    "WorkerSettings.task_reject_on_worker_lost": "Celery: requeue the job when a pool process dies",
    "WorkerSettings.worker_prefetch_multiplier": "Celery: messages reserved per process",
    "WorkerSettings.task_soft_time_limit": "Celery: the job fails with 'time limit exceeded'",
    "WorkerSettings.task_time_limit": "Celery: hard kill (counts as a lost worker)",
    "WorkerSettings.unacked_restore_interval": "sweep for dead workers' messages every interval × throttle s",
    "WorkerSettings.unacked_restore_throttle": "see unacked_restore_interval",
    "WorkerSettings.worker_pool": "Celery: pool implementation",
    "WorkerSettings.worker_max_tasks_per_child": "Celery: recycle a pool process after this many jobs",
    "WorkerSettings.broker_connection_timeout": "Celery: broker connect timeout in seconds",
    "RetrieverSettings.qdrant_api_key": "API key of the Qdrant server",
    "RetrieverSettings.embedding_device": "torch device of the embedding model",
    "RetrieverSettings.pools_collection": "Qdrant collection of the pool cache",
    "RetrieverSettings.passage_words": "passage length in words",
    "RetrieverSettings.embed_batch_size": "passages embedded per batch while indexing",
    "RetrieverSettings.dedupe_cosine": "near-duplicate threshold: items this close to a kept one are dropped",
    "RetrieverSettings.max_question_chars": "longer questions are refused with 422",
    "RetrieverSettings.pool_ttl_s": "lifetime of a cached pool",
    "RetrieverSettings.web_provider": "web search provider; none = Wikipedia-only pools",
    "RetrieverSettings.web_timeout_s": "timeout per web search request",
    "RetrieverSettings.serper_api_key": "Serper API key",
    "RetrieverSettings.serper_url": "Serper endpoint",
    "RetrieverSettings.brave_api_key": "Brave Search API key",
    "RetrieverSettings.brave_url": "Brave Search endpoint",
    "RetrieverSettings.host": "bind address of `parley retriever`",
    "RetrieverSettings.port": "port of `parley retriever`",
    "RetrieverSettings.log_level": "uvicorn log level",
    "EvalSettings.judge_model": "judge model name",
    "EvalSettings.judge_api_key": "judge API key",
    "EvalSettings.judge_timeout_s": "judge read timeout",
    "EvalSettings.judge_max_tokens": "judge reply budget",
    "EvalSettings.api_key": "gateway key for --api runs (same as --api-key)",
    "EvalSettings.api_poll_interval_s": "batch status polling interval",
    "EvalSettings.api_timeout_s": "HTTP timeout towards the gateway",
    "EvalSettings.bootstrap_samples": "paired-bootstrap resamples",
    "EvalSettings.bootstrap_seed": "paired-bootstrap seed",
}

_BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)


@dataclass(frozen=True)
class Row:
    """One line of the reference: an environment variable and what it sets."""

    env: str
    field: str  # ``ClassName.field`` or ``ClassName.field.sub`` for nested models
    type: str
    default: str
    description: str


def import_packages(packages: Iterable[str] = PACKAGES) -> list[str]:
    """Import every module of ``packages`` so their settings classes exist; return those that failed.

    A module that cannot be imported (an optional extra not installed) is reported, not fatal: the
    settings classes of the other modules are still documented.
    """
    failed: list[str] = []
    for package_name in packages:
        package = importlib.import_module(package_name)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            if module.name.endswith("__main__"):
                continue  # running it is its only purpose
            try:
                importlib.import_module(module.name)
            except Exception as exc:  # an optional dependency, or a module broken right now
                failed.append(f"{module.name}: {type(exc).__name__}: {exc}")
    return failed


def _all_subclasses(cls: type[BaseSettings]) -> Iterator[type[BaseSettings]]:
    sub: type[BaseSettings]
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``X | None``), which become nested variables."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _model_types(arg)]
    return []


def settings_classes(module_prefixes: Iterable[str] = PACKAGES) -> list[type[BaseSettings]]:
    """Settings classes defined in the given modules, excluding bases without fields and nested models.

    A settings class without a prefix of its own that is used as a field type of another one
    (``EndpointOverride`` in ``LLMSettings``) is documented where it is nested, under the outer class's
    prefix, not on its own.
    """
    prefixes = tuple(p if p.endswith(".") else p + "." for p in module_prefixes)
    found = {
        cls
        for cls in _all_subclasses(BaseSettings)
        if (cls.__module__ + ".").startswith(prefixes) and cls.model_fields
    }
    nested = {m for cls in found for f in cls.model_fields.values() for m in _model_types(f.annotation)}
    # A nested class with a prefix of its own is also read on its own, so it keeps its own section.
    classes = [cls for cls in found if cls not in nested or _env_prefix(cls)]
    return sorted(classes, key=lambda c: (_env_prefix(c), c.__module__, c.__qualname__))


def _env_prefix(cls: type[BaseModel]) -> str:
    return str(cls.model_config.get("env_prefix") or "").upper()


def _env_names(prefix: str, name: str, field: FieldInfo) -> list[str]:
    """The variables pydantic-settings reads for a field: an alias replaces prefix and name."""
    alias = field.validation_alias if field.validation_alias is not None else field.alias
    if isinstance(alias, str):
        return [alias.upper()]
    choices = getattr(alias, "choices", None)
    if choices:
        return [c.upper() for c in choices if isinstance(c, str)]
    return [f"{prefix}{name}".upper()]


def type_name(annotation: Any) -> str:
    """A short, stable spelling of a field type: ``int``, ``str | None``, ``"a" | "b"``, ``list[str]``."""
    if annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if inspect.isclass(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _is_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    return any(_is_secret(a) for a in typing.get_args(annotation))


def _bounds(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for kind, attribute, sign in _BOUNDS:
            if isinstance(meta, kind):
                parts.append(f"{sign} {getattr(meta, attribute)}")
    return ", ".join(parts)


def _render_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Path):
        # Defaults under the working directory (``default_data_dir()``) are shown relative to it,
        # which is how they behave and keeps the reference the same on every machine.
        try:
            return "./" + value.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return value.as_posix()
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json", exclude_none=True))
    if isinstance(value, list | dict | tuple):
        return json.dumps(value)
    if isinstance(value, str) and value == "":
        return '""'
    return str(value)


def default_text(field: FieldInfo) -> str:
    """The default as an operator would write it; secrets never show one, a required field says so."""
    if _is_secret(field.annotation):
        return "(secret)"
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    return "unset" if value is None else f"`{_render_value(value)}`"


def _description(owner: type[BaseModel], name: str, field: FieldInfo) -> str:
    text = field.description or DESCRIPTIONS.get(f"{owner.__name__}.{name}", "")
    return " ".join(text.split())


def _cell(text: str, code: bool = False) -> str:
    """Table-safe Markdown: pipes escaped; outside code spans, angle brackets shown, not read as HTML."""
    text = text.replace("|", "\\|")
    if code:
        return f"`{text}`"
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def rows_for(cls: type[BaseSettings]) -> list[Row]:
    """One row per variable of ``cls``; a nested model gives a row for itself and for each of its fields."""
    prefix = _env_prefix(cls)
    delimiter = cls.model_config.get("env_nested_delimiter") or ""
    rows: list[Row] = []
    for name, field in cls.model_fields.items():
        bounds = _bounds(field)
        type_text = type_name(field.annotation) + (f" ({bounds})" if bounds else "")
        description = _description(cls, name, field)
        models = _model_types(field.annotation)
        if models and delimiter:
            description = (description + "; " if description else "") + (
                f"a JSON object, or each field as `{prefix}{name.upper()}{delimiter}FIELD`"
            )
        # A nested model's default is its fields' defaults, listed below it; building it could read the
        # environment (a nested settings class does), which would make the page depend on the machine.
        default = "see below" if models and delimiter else default_text(field)
        for env in _env_names(prefix, name, field):
            rows.append(Row(env, f"{cls.__name__}.{name}", type_text, default, description))
            if not (models and delimiter):
                continue
            for model in models:
                for sub_name, sub in model.model_fields.items():
                    bounds = _bounds(sub)
                    rows.append(
                        Row(
                            env=f"{env}{delimiter}{sub_name.upper()}",
                            field=f"{cls.__name__}.{name}.{sub_name}",
                            type=type_name(sub.annotation) + (f" ({bounds})" if bounds else ""),
                            default=default_text(sub),
                            description=_description(model, sub_name, sub),
                        )
                    )
    return rows


def stale_descriptions(classes: Iterable[type[BaseSettings]]) -> list[str]:
    """``DESCRIPTIONS`` keys that name no field of the documented classes (or their nested models)."""
    known: set[str] = set()
    for cls in classes:
        for name, field in cls.model_fields.items():
            known.add(f"{cls.__name__}.{name}")
            for model in _model_types(field.annotation):
                known.update(f"{model.__name__}.{sub}" for sub in model.model_fields)
    return sorted(set(DESCRIPTIONS) - known)


def _source_path(cls: type) -> str:
    module = sys.modules[cls.__module__]
    path = Path(module.__file__ or "")
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return cls.__module__


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")


HEADER = f"""\
<!-- Generated by scripts/config_reference.py from the settings classes; do not edit by hand.
     Regenerate with `make docs` ({GENERATE_COMMAND}). -->
# Configuration reference

Every Parley process reads its configuration once, at start-up, from environment variables into one
frozen settings class, and passes it on; no other code reads the environment. This page lists every
variable of every settings class, generated from the classes themselves.

- Names are case-insensitive; they are written here in upper case.
- Nested values use a double underscore: `PARLEY_LLM_JUDGE__MODEL=…` sets the judge's model only.
- Lists, dicts and nested models can also be given as JSON: `PARLEY_WORKER_QUEUES='["parley.batch"]'`.
- Secrets (`SecretStr`) are never shown with a default and are never printed by Parley.
- Any top-level variable can be read from a file instead: `VARIABLE_FILE=/run/secrets/name` (compose
  and Kubernetes secrets), e.g. `PARLEY_WORKER_REDIS_URL_FILE`, `PARLEY_LLM_API_KEY_FILE`,
  `PARLEY_RETRIEVER_TOKEN_FILE`; one trailing newline is dropped, and setting both is refused.
- Unknown variables are ignored, so one environment can serve every process.
- Bounds such as `≥ 1` are checked at start-up; a value outside them stops the process with a message
  naming the variable.

Which process reads which class is summarised in the [README](../README.md#configuration); the
operations pages explain the settings in context ([gateway and operations](gateway-and-operations.md),
[retrieval](retrieval.md), [engine and protocols](engine-and-protocols.md),
[evaluation](evaluation.md)).
"""


def generate(classes: Iterable[type[BaseSettings]] | None = None) -> str:
    """The complete Markdown of the reference for ``classes`` (default: every class Parley defines)."""
    if classes is None:
        classes = settings_classes()
    out = [HEADER]
    for cls in classes:
        prefix = _env_prefix(cls)
        out.append(f"\n## `{cls.__name__}` — `{prefix}*`\n")
        out.append(f"Defined in `{_source_path(cls)}`. {_summary(cls)}\n")
        out.append("| variable | type | default | description |")
        out.append("|---|---|---|---|")
        for row in rows_for(cls):
            cells = (_cell(row.type, code=True), _cell(row.default), _cell(row.description))
            out.append(f"| `{row.env}` | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


_DOCUMENTED = re.compile(r"^\| `([A-Z0-9_]+)` \|", re.MULTILINE)


def documented_variables(markdown: str) -> set[str]:
    """The variable names that have a row in a reference page."""
    return set(_DOCUMENTED.findall(markdown))


def missing_rows(markdown: str, classes: Iterable[type[BaseSettings]]) -> list[Row]:
    """Rows of ``classes`` whose variable has no line in ``markdown``."""
    documented = documented_variables(markdown)
    return [row for cls in classes for row in rows_for(cls) if row.env not in documented]


def _display(path: Path) -> str:
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def check(reference: Path = REFERENCE) -> list[str]:
    """Problems of the committed reference against a fresh generation; empty when it is up to date."""
    classes = settings_classes()
    fresh = generate(classes)
    current = reference.read_text(encoding="utf-8") if reference.exists() else ""
    stale = [
        f"DESCRIPTIONS in scripts/config_reference.py names a field that is gone: {key}"
        for key in stale_descriptions(classes)
    ]
    if current == fresh:
        return stale
    problems = [f"no line for {row.field} ({row.env})" for row in missing_rows(current, classes)]
    diff = difflib.unified_diff(
        current.splitlines(), fresh.splitlines(), "committed", "generated", n=0, lineterm=""
    )
    problems.append("the reference differs from a fresh generation:\n" + "\n".join(list(diff)[:60]))
    problems.append(f"run `{GENERATE_COMMAND}` (or `make docs`) and commit {_display(reference)}")
    return stale + problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"write {REFERENCE.relative_to(REPO)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the reference is out of date")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    for failure in import_packages():
        print(f"warning: could not import {failure}", file=sys.stderr)
    if args.write:
        for key in stale_descriptions(settings_classes()):
            print(f"warning: DESCRIPTIONS names a field that is gone: {key}", file=sys.stderr)
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE.write_text(generate(), encoding="utf-8")
        print(f"wrote {REFERENCE.relative_to(REPO)}")
        return 0
    problems = check()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

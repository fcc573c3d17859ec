"""Experiment files: a whole study (datasets × models × a settings grid × seeds, each running a list of
protocols) declared in one TOML or YAML file and checked whole before the first model call.

``parley eval --experiment FILE`` reads the file (``load_experiment``), expands it into cells
(``Experiment.cells``): one cell per dataset × model × grid point × seed, each an ordinary results folder
that the file's ``[[runs]]`` fill in order, as a suite's tiers fill one folder. ``evaluation.study`` runs
the cells and writes the study report.

Every error names the file and the line of the setting it is about (the parsers' own positions for
syntax; for a wrong value, the line of the key that holds it), so a typo in cell 40 of a grid fails in
a second, not after 39 cells of model calls.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.config import DebateConfig
from engine.registry import PROTOCOLS
from evaluation.experiment_text import ExperimentError, Locator, parse_text
from evaluation.harness import EvalRequest, PlanError, plan_request
from evaluation.presets import PRESETS
from evaluation.scoring import DEFAULT_PRIMARY, PRIMARY_METRICS
from evaluation.suite import SUITES

# Bounds that keep a typo in a grid from planning a month of model calls.
MAX_CELLS = 200
MAX_SEEDS = 20
MAX_FILE_BYTES = 1_000_000
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StudySettings(_Strict):
    name: str = Field(pattern=NAME, description="the study's name, in its report")
    description: str = ""
    out: str = Field(description="the study's folder (relative to the file); one folder per cell inside")
    baseline: str | None = Field(
        default=None,
        description="what every run is compared with (paired bootstrap): a run label (each cell's own, "
        "e.g. rag) or CELL/LABEL for one run of one cell; default: each cell's first run",
    )
    primary: str = DEFAULT_PRIMARY
    bootstrap_samples: int = Field(default=10_000, ge=100, le=1_000_000)
    bootstrap_seed: int = 0
    concurrency: int = Field(default=1, ge=1, le=64, description="questions debated at once per run")
    suite_report: str | None = Field(
        default=None, description="also write this named suite's report into each cell (e.g. evidence)"
    )
    interleave: int | None = Field(
        default=None,
        ge=1,
        description="advance every cell of a dataset and model this many questions at a time (each run "
        "to questions 1..N, then 1..2N, …) instead of one cell after another: a study stopped early "
        "holds every cell on the same leading questions, paired",
    )

    @field_validator("primary")
    @classmethod
    def _known_primary(cls, value: str) -> str:
        if value not in PRIMARY_METRICS:
            raise ValueError(f"unknown metric {value!r}; one of {', '.join(PRIMARY_METRICS)}")
        return value


class DatasetEntry(_Strict):
    name: str = Field(pattern=NAME)
    path: str = Field(description="JSON lines or a JSON array, relative to the file")
    format: str = "auto"
    pool: Literal["auto", "file", "retriever"] = "auto"
    on_error: Literal["skip", "fail"] = "skip"
    slice: str | None = Field(
        default=None,
        description="a split of the usable questions, START:STOP[:STEP] (parley eval --slice), e.g. the "
        "held-out ones",
    )


class ModelEntry(_Strict):
    """One model the runs are repeated with. Neither ``embedded`` nor ``base_url``: the operator's
    configured LLM (``PARLEY_LLM_*``)."""

    name: str = Field(pattern=NAME)
    embedded: str | None = Field(default=None, description="an embedded model (parley models list)")
    base_url: str | None = Field(default=None, description="an OpenAI-compatible endpoint (…/v1)")
    model: str | None = Field(default=None, description="the model name the endpoint serves")
    api_key_env: str | None = Field(
        default=None,
        pattern=r"^[A-Z_][A-Z0-9_]*$",
        description="the environment variable holding the endpoint's key (the file holds no secret)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        if self.embedded is not None and (self.base_url or self.model or self.api_key_env):
            raise ValueError("a model is either embedded or an endpoint (base_url, model), not both")
        if self.base_url is not None and not self.model:
            raise ValueError("an endpoint needs the model name it serves (model)")
        if self.base_url is None and (self.model or self.api_key_env):
            raise ValueError("model and api_key_env go with base_url")
        return self

    def llm_overrides(self) -> dict[str, Any] | None:
        """The ``LLMSettings`` fields this entry sets (None: the operator's own settings)."""
        if self.embedded is not None:
            return {"base_url": None, "embedded_model": self.embedded}
        if self.base_url is not None:
            overrides: dict[str, Any] = {"base_url": self.base_url, "model": self.model}
            if self.api_key_env is not None:
                overrides["api_key"] = os.environ.get(self.api_key_env)
            return overrides
        return None


class RunEntry(_Strict):
    """Protocols run into every cell's folder, in file order (a later entry adds runs beside the
    earlier ones, on the first ``limit`` questions)."""

    protocols: list[str] = Field(min_length=1)
    prompt_styles: list[str] | None = None
    preset: str | None = None
    limit: int | None = Field(default=None, ge=1)
    same_budget: bool = False
    config: dict[str, Any] = Field(default_factory=dict)


class ExperimentFile(_Strict):
    study: StudySettings
    datasets: list[DatasetEntry] = Field(min_length=1)
    models: list[ModelEntry] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict, description="every run's base DebateConfig")
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="config key (dotted for nested) → values; cells = the product"
    )
    seeds: list[int] | None = Field(default=None, min_length=1, max_length=MAX_SEEDS)
    repeats: int | None = Field(default=None, ge=1, le=MAX_SEEDS, description="= seeds 0 … repeats-1")
    runs: list[RunEntry] = Field(min_length=1)

    @field_validator("grid")
    @classmethod
    def _grid_lists(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            if not values:
                raise ValueError(f"{key}: a grid axis needs at least one value")
            if len({repr(v) for v in values}) != len(values):
                raise ValueError(f"{key}: a value is listed twice")
        return grid

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentFile:
        if self.seeds is not None and self.repeats is not None:
            raise ValueError("give seeds or repeats, not both")
        for kind, names in (
            ("dataset", [d.name for d in self.datasets]),
            ("model", [m.name for m in self.models]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind} names listed twice: {', '.join(dupes)}")
        return self


@dataclass(frozen=True)
class Cell:
    """One results folder of a study: a dataset, a model, one point of the grid and a seed."""

    label: str  # what the report calls it: "agents=2,rounds=1" (empty parts left out), or "main"
    folder: Path
    dataset: DatasetEntry
    model: ModelEntry | None
    grid: dict[str, Any]
    seed: int | None
    requests: tuple[EvalRequest, ...]  # the file's [[runs]], in order, into ``folder``


@dataclass(frozen=True)
class Experiment:
    path: Path
    sha256: str
    spec: ExperimentFile
    cells: tuple[Cell, ...]

    @property
    def out(self) -> Path:
        return resolve(self.path, self.spec.study.out)

    def run_ids(self) -> list[str]:
        return [
            f"{cell.label}/{s.label}" for cell in self.cells for r in cell.requests for s in plan_request(r)
        ]


def resolve(base_file: Path, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else Path(os.path.normpath(base_file.parent / path))


# --- reading -------------------------------------------------------------------------------------------


StyleFor = Callable[[dict[str, Any] | None], str | None]


def load_experiment(path: Path, *, out: Path | None = None, style_for: StyleFor | None = None) -> Experiment:
    """Read, validate and expand an experiment file; any problem raises ``ExperimentError`` naming the
    line. Nothing is called: datasets are read and every run's config is validated here. ``style_for``:
    the prompt style of runs that name none, for a model entry's LLM settings (None: the engine's)."""
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot read the experiment file ({exc.strerror})") from None
    if len(raw_bytes) > MAX_FILE_BYTES:
        raise ExperimentError(
            f"{path}: {len(raw_bytes)} bytes; an experiment file is at most {MAX_FILE_BYTES}"
        )
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise ExperimentError(f"{path}: not UTF-8 text") from None
    data, lines = parse_text(path, text)
    where = Locator(path, lines)
    try:
        spec = ExperimentFile.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(where.describe(exc)) from None
    if out is not None:
        spec = spec.model_copy(update={"study": spec.study.model_copy(update={"out": str(out.resolve())})})
    cells = expand(path, spec, where, style_for)
    experiment = Experiment(path=path, sha256=hashlib.sha256(raw_bytes).hexdigest(), spec=spec, cells=cells)
    check_references(experiment, where)
    return experiment


# --- expanding -----------------------------------------------------------------------------------------


def set_dotted(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """``config`` with ``key`` (``mallm.decision`` for a protocol's own setting) set to ``value``."""
    out = dict(config)
    head, _, rest = key.partition(".")
    if rest:
        inner = out.get(head)
        out[head] = set_dotted(inner if isinstance(inner, dict) else {}, rest, value)
    else:
        out[head] = value
    return out


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _value_label(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-")[:32] or "x"


def _seeds(spec: ExperimentFile) -> list[int | None]:
    if spec.seeds is not None:
        return list(spec.seeds)
    if spec.repeats is not None:
        return list(range(spec.repeats))
    return [None]


def expand(path: Path, spec: ExperimentFile, where: Locator, style_for: StyleFor | None) -> tuple[Cell, ...]:
    """One cell per dataset × model × grid point × seed, each with its requests validated."""
    models: list[ModelEntry | None] = list(spec.models) or [None]
    axes = list(spec.grid)
    points = [dict(zip(axes, values, strict=True)) for values in itertools.product(*spec.grid.values())]
    seeds = _seeds(spec)
    total = len(spec.datasets) * len(models) * len(points) * len(seeds)
    if total > MAX_CELLS:
        raise ExperimentError(
            f"{where.at(('grid',))}: {total} cells (datasets × models × grid × seeds); a study is at most "
            f"{MAX_CELLS}: split it into several files"
        )
    _check_models(spec, where)
    _check_runs(spec, where)
    _check_datasets(path, spec, where)
    out = resolve(path, spec.study.out)
    cells: list[Cell] = []
    for dataset, model, point, seed in itertools.product(spec.datasets, models, points, seeds):
        parts = [dataset.name] if len(spec.datasets) > 1 else []
        if len(models) > 1 and model is not None:
            parts.append(model.name)
        parts += [f"{k}={_value_label(v)}" for k, v in point.items()]
        if len(seeds) > 1:
            parts.append(f"seed={seed}")
        label = ",".join(parts) or "main"
        cell = Cell(
            label=label,
            folder=out if total == 1 else out / label.replace(",", "_"),
            dataset=dataset,
            model=model,
            grid=point,
            seed=seed,
            requests=(),
        )
        cells.append(replace(cell, requests=_cell_requests(path, spec, cell, where, style_for)))
    _check_distinct_labels(cells, where)
    return tuple(cells)


def _check_models(spec: ExperimentFile, where: Locator) -> None:
    # lazy: the registry is read only for files that name models
    from services.llm import MODELS, is_installed

    for i, model in enumerate(spec.models):
        if model.embedded is not None and model.embedded not in MODELS:
            raise ExperimentError(
                f"{where.at(('models', i, 'embedded'))}: unknown embedded model {model.embedded!r}; "
                f"known: {', '.join(sorted(MODELS))}"
            )
        if model.embedded is not None and not is_installed(MODELS[model.embedded]):
            raise ExperimentError(
                f"{where.at(('models', i, 'embedded'))}: the embedded model {model.embedded!r} is not "
                f"installed: .venv/bin/parley models install {model.embedded}"
            )
        if model.api_key_env is not None and not os.environ.get(model.api_key_env):
            raise ExperimentError(
                f"{where.at(('models', i, 'api_key_env'))}: the environment variable {model.api_key_env} "
                "is not set (it holds the endpoint's key)"
            )


def _check_runs(spec: ExperimentFile, where: Locator) -> None:

    for i, entry in enumerate(spec.runs):
        unknown = [p for p in entry.protocols if p not in PROTOCOLS]
        if unknown:
            raise ExperimentError(
                f"{where.at(('runs', i, 'protocols'))}: unknown protocol {', '.join(map(repr, unknown))}; "
                f"protocols: {', '.join(PROTOCOLS)}"
            )
        if entry.preset is not None and entry.preset not in PRESETS:
            raise ExperimentError(
                f"{where.at(('runs', i, 'preset'))}: unknown preset {entry.preset!r}; "
                f"presets: {', '.join(sorted(PRESETS))}"
            )
        first = spec.runs[0].limit
        if i and first is not None and (entry.limit is None or entry.limit > first):
            raise ExperimentError(
                f"{where.at(('runs', i, 'limit'))}: a later run cannot cover more questions than the first "
                f"({first}): they share the first run's questions"
            )


def _check_datasets(path: Path, spec: ExperimentFile, where: Locator) -> None:
    """Each dataset read (as far as the first run's limit) before anything runs."""
    # lazy: numpy-free until needed
    from evaluation.datasets import DatasetError, SliceError, load_dataset, parse_slice

    for i, dataset in enumerate(spec.datasets):
        try:
            load_dataset(
                resolve(path, dataset.path),
                fmt=dataset.format,
                on_error=dataset.on_error,
                limit=spec.runs[0].limit,
                select=parse_slice(dataset.slice) if dataset.slice else None,
            )
        except (DatasetError, OSError) as exc:
            key = "slice" if isinstance(exc, SliceError) else "path"
            raise ExperimentError(f"{where.at(('datasets', i, key))}: {exc}") from None


def _cell_requests(
    path: Path, spec: ExperimentFile, cell: Cell, where: Locator, style_for: StyleFor | None
) -> tuple[EvalRequest, ...]:
    """The cell's ``parley eval`` requests, one per ``[[runs]]`` entry, each planned (validated)."""
    config = dict(spec.config)
    for key, value in cell.grid.items():
        config = set_dotted(config, key, value)
    if cell.seed is not None:
        config["seed"] = cell.seed
    overrides = cell.model.llm_overrides() if cell.model is not None else None
    default_style = style_for(overrides) if style_for is not None else None
    requests = []
    for i, entry in enumerate(spec.runs):
        request = EvalRequest(
            dataset=resolve(path, cell.dataset.path),
            out=cell.folder,
            protocols=list(entry.protocols),
            prompt_styles=entry.prompt_styles,
            limit=entry.limit,
            select=cell.dataset.slice,
            fmt=cell.dataset.format,
            on_error=cell.dataset.on_error,
            base_config=merge(config, entry.config),
            primary=spec.study.primary,  # type: ignore[arg-type]
            concurrency=spec.study.concurrency,
            bootstrap_samples=spec.study.bootstrap_samples,
            bootstrap_seed=spec.study.bootstrap_seed,
            preset=entry.preset,
            pool=cell.dataset.pool,
            same_budget=entry.same_budget,
            fresh=False,
            default_style=default_style,
            llm_overrides=overrides,
        )
        try:
            plan_request(request)
        except PlanError as exc:
            culprit = _grid_culprit(spec, cell.grid, where) or where.at(("runs", i))
            raise ExperimentError(f"{culprit}: cell {cell.label}, runs[{i}]: {exc}") from None
        requests.append(request)
    return tuple(requests)


def _grid_culprit(spec: ExperimentFile, point: dict[str, Any], where: Locator) -> str | None:
    """The grid axis whose value makes a run invalid on its own (so the message points at its line)."""
    protocols = {p for entry in spec.runs for p in entry.protocols}
    for key, value in point.items():
        if key.split(".", 1)[0] not in DebateConfig.model_fields:
            continue
        for protocol in protocols:
            try:
                DebateConfig.model_validate(set_dotted({"protocol": protocol}, key, value))
            except ValidationError:
                return f"{where.at(('grid', key))} (grid {key} = {value!r})"
    return None


def _check_distinct_labels(cells: Iterable[Cell], where: Locator) -> None:
    seen: dict[str, str] = {}
    for cell in cells:
        folder = cell.folder.name
        if folder in seen and seen[folder] != cell.label:
            raise ExperimentError(
                f"{where.at(('grid',))}: cells {seen[folder]!r} and {cell.label!r} would share one folder; "
                "make the grid values differ in letters or digits"
            )
        seen[folder] = cell.label


def check_references(experiment: Experiment, where: Locator) -> None:
    """The baseline names a run of the study, and the suite report a known suite."""
    report = experiment.spec.study.suite_report
    if report is not None and report not in SUITES:
        known = ", ".join(SUITES)
        raise ExperimentError(
            f"{where.at(('study', 'suite_report'))}: unknown suite {report!r}; suites: {known}"
        )
    baseline = experiment.spec.study.baseline
    if baseline is None:
        return
    ids = experiment.run_ids()
    labels = {run_id.split("/", 1)[1] for run_id in ids}
    if ("/" in baseline and baseline not in ids) or ("/" not in baseline and baseline not in labels):
        known = ", ".join(sorted(labels)) if "/" not in baseline else ", ".join(ids[:8])
        raise ExperimentError(
            f"{where.at(('study', 'baseline'))}: baseline {baseline!r} is no run of this study; runs: {known}"
        )

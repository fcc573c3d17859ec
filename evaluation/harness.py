"""One evaluation from start to report: plan the runs, execute them (in-process or via the API), report.

The CLI only parses options and builds the real dependencies; tests call ``evaluate`` with the scripted
LLM, a fixed pool builder and a real FastAPI batch app, so the path they check is the one users run.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from engine.config import HONOURED, SINGLE_AGENT_PROTOCOLS, DebateConfig
from engine.context import RoleModels
from evaluation.api_client import run_via_api
from evaluation.datasets import Dataset, load_dataset, parse_slice
from evaluation.eval_pools import needs_pool
from evaluation.items import OnError
from evaluation.judge import AnswerJudge
from evaluation.presets import UnknownPreset, get_preset, shared_settings
from evaluation.provenance import log_provenance
from evaluation.published import guess_benchmark
from evaluation.report import build_report
from evaluation.run_loop import EvalOptions, PoolSource, RunTally, judge_pass
from evaluation.runner import run_in_process
from evaluation.same_budget import budget_label, vote_config
from evaluation.scoring import DEFAULT_PRIMARY, PrimaryMetric
from evaluation.store import Manifest, RunSpec, Workspace, check_label
from parley_client import AsyncParleyClient
from services.knowledge import PoolBuilder


class PlanError(ValueError):
    """The command line asks for something impossible (unknown protocol, bad --compare, …)."""


@dataclass
class EvalRequest:
    dataset: Path
    out: Path
    protocols: list[str]
    prompt_styles: list[str] | None = None
    limit: int | None = None
    # A split of the dataset's usable questions, START:STOP[:STEP] (``datasets.parse_slice``); the
    # limit counts within it.
    select: str | None = None
    fmt: str = "auto"
    on_error: OnError = "skip"
    base_config: dict[str, Any] = field(default_factory=dict)
    primary: PrimaryMetric = DEFAULT_PRIMARY
    compare: list[tuple[str, str]] = field(default_factory=list)
    fresh: bool = False
    concurrency: int = 1
    bootstrap_samples: int = 10_000
    bootstrap_seed: int = 0
    plots: bool = True
    progress: bool = True
    max_consecutive_failures: int = 10
    judge_model: str | None = None
    preset: str | None = None
    benchmark: str | None = None
    pool: str = "auto"  # auto: the dataset's own pools when it has them; file; retriever
    same_budget: bool = False
    # The call cache of an in-process run (``services.call_cache``): on, off, or replay only.
    cache: Literal["on", "off", "only"] = "on"
    # What produced the answers (the in-process runner's ``inprocess.provenance``), logged per invocation.
    provenance: dict[str, Any] | None = None
    # The prompt style of runs that name none (no --prompt-styles, no prompt_style in the config, no
    # preset): the one the model answers reliably with (robust on the embedded models). None: the
    # engine's default, the papers' wording.
    default_style: str | None = None
    # The LLM settings an experiment file's model entry sets (``LLMSettings`` fields; None: the
    # operator's environment). Only the in-process runner reads it; it never reaches a results folder.
    llm_overrides: dict[str, Any] | None = None


@dataclass
class EvalOutcome:
    dataset: Dataset
    manifest: Manifest
    labels: list[str]
    tallies: list[RunTally]
    report: dict[str, Any]


def plan_runs(
    protocols: Sequence[str],
    styles: Sequence[str] | None,
    base: dict[str, Any],
    default_style: str | None = None,
) -> list[RunSpec]:
    """One ``RunSpec`` per protocol × style, each validated as a full ``DebateConfig``.

    Labels are ``protocol`` when no styles are asked for, ``protocol-style`` otherwise. Without styles
    the run uses ``default_style`` (the style the model answers reliably with, chosen per model by the
    caller) unless the config sets ``prompt_style`` itself; without either, the config's default.
    Validation happens before anything runs, so a typo fails in a second, not an hour in.
    """
    if not protocols:
        raise PlanError("no protocols given")
    dupes = {p for p in protocols if list(protocols).count(p) > 1}
    if dupes:
        raise PlanError(f"protocols listed twice: {', '.join(sorted(dupes))}")
    specs: list[RunSpec] = []
    errors: list[str] = []
    # Shared settings go to the protocols that use them (``--set rounds=2`` shapes the debates, not
    # the single-agent baselines beside them; each run's config in the report says what it used).
    # A setting no planned protocol uses is refused: it would change nothing.
    unused = sorted(k for k in base if all(k not in HONOURED.get(p, {k}) for p in protocols))
    if unused:
        raise PlanError(f"no listed protocol uses {', '.join(unused)} ({', '.join(protocols)})")
    for protocol in protocols:
        style_list: list[str | None] = list(styles) if styles else [None]
        shared = {k: v for k, v in base.items() if k in HONOURED.get(protocol, set(base))}
        for style in style_list:
            values = {**shared, "protocol": protocol}
            if style is not None:
                values["prompt_style"] = style
            elif default_style is not None and "prompt_style" not in shared:
                values["prompt_style"] = default_style
            try:
                cfg = DebateConfig.model_validate(values)
            except ValidationError as exc:
                msgs = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()
                )
                errors.append(f"{protocol}{'-' + style if style else ''}: {msgs}")
                continue
            label = check_label(f"{protocol}-{style}" if style is not None else protocol)
            specs.append(
                RunSpec(
                    label=label,
                    protocol=protocol,
                    prompt_style=cfg.prompt_style,
                    config=cfg.model_dump(mode="json"),
                )
            )
    if errors:
        raise PlanError("invalid run configuration:\n  " + "\n  ".join(errors))
    return specs


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())


def plan_request(request: EvalRequest) -> list[RunSpec]:
    """The runs of a request: a preset's run (and any ``--protocols`` next to it as baselines with the
    preset's shared settings) or the protocols × styles, plus a same-budget vote run per debate."""
    if request.preset is None:
        specs = plan_runs(
            request.protocols, request.prompt_styles, request.base_config, request.default_style
        )
    else:
        specs = plan_preset(request.preset, request.protocols, request.prompt_styles, request.base_config)
    if request.same_budget:
        debates = [s for s in specs if s.protocol not in SINGLE_AGENT_PROTOCOLS]
        if not debates:
            raise PlanError("--same-budget needs a multi-agent run to take the budget from")
        for spec in debates:
            config = vote_config(spec.config)
            specs.append(
                RunSpec(
                    label=check_label(budget_label(spec.label)),
                    protocol="self_consistency",
                    prompt_style=str(config["prompt_style"]),
                    config=config,
                    budget_of=spec.label,
                )
            )
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise PlanError(f"runs planned twice: {', '.join(dupes)}")
    return specs


def plan_preset(
    name: str, protocols: Sequence[str], styles: Sequence[str] | None, overrides: dict[str, Any]
) -> list[RunSpec]:
    """The preset's run labelled with its name (``name-style`` per prompt style when styles are
    given), then ``protocols`` as baselines sharing the preset's temperature, style and (for RAG)
    knowledge; ``--config``/``--set`` values apply to every run that uses them."""
    try:
        preset = get_preset(name)
    except UnknownPreset as exc:
        raise PlanError(str(exc)) from None
    specs: list[RunSpec] = []
    style_list: list[str | None] = list(styles) if styles else [None]
    for style in style_list:
        values = dict(overrides)
        if style is not None:
            values["prompt_style"] = style
        try:
            cfg = preset.debate_config(values)
        except ValidationError as exc:
            raise PlanError(f"invalid run configuration:\n  {name}: {_validation_message(exc)}") from None
        label = check_label(f"{name}-{style}" if style is not None else name)
        specs.append(
            RunSpec(
                label=label,
                protocol=cfg.protocol,
                prompt_style=cfg.prompt_style,
                config=cfg.model_dump(mode="json"),
            )
        )
    for protocol in protocols:
        base = {**shared_settings(preset.config, protocol), **shared_settings(overrides, protocol)}
        specs.extend(plan_runs([protocol], styles, base))
    return specs


def check_compare(pairs: Sequence[tuple[str, str]], labels: Sequence[str]) -> None:
    unknown = sorted({x for pair in pairs for x in pair if x not in labels})
    if unknown:
        raise PlanError(f"--compare names unknown runs {', '.join(unknown)}; runs are: {', '.join(labels)}")


async def evaluate(
    request: EvalRequest,
    *,
    models: RoleModels | None = None,
    pool_builder: PoolBuilder | None = None,
    judge: AnswerJudge | None = None,
    batch_client: AsyncParleyClient | None = None,
    poll_interval_s: float = 2.0,
) -> EvalOutcome:
    """Run (or resume) every requested run and write the report. In-process needs ``models`` (and a
    ``pool_builder`` for knowledge protocols); ``batch_client`` sends the work to the gateway instead."""
    if request.primary == "judge" and judge is None:
        raise PlanError("--primary judge needs the LLM judge (set PARLEY_EVAL_JUDGE_BASE_URL or --judge-url)")
    specs = plan_request(request)
    # A cached model numbers identical calls within a run: each evaluation starts from sample 0, so a
    # study's cells (and a suite's tiers) replay as if each had its own process.
    restart_samples = getattr(models, "restart_samples", None)
    if restart_samples is not None:
        restart_samples()
    if batch_client is not None and any(s.budget_of for s in specs):
        raise PlanError("--same-budget runs in-process only (it sizes each vote from the debate's tokens)")
    labels = [s.label for s in specs]
    if request.fresh and request.out.exists():
        shutil.rmtree(request.out)
    ws = Workspace(request.out)
    earlier = ws.load_manifest()
    # Runs already in the folder stay in the report and can be compared with: a folder can be filled
    # one run at a time (e.g. the slow paper-style runs after the robust ones).
    report_labels = labels + [r.label for r in (earlier.runs if earlier else []) if r.label not in labels]
    check_compare(request.compare, report_labels)
    dataset = load_dataset(
        request.dataset,
        fmt=request.fmt,
        on_error=request.on_error,
        limit=request.limit,
        select=parse_slice(request.select) if request.select else None,
    )
    pool_source = resolve_pool_source(request.pool, dataset)
    if (
        batch_client is not None
        and pool_source == "file"
        and dataset.items_with_pools
        and any(needs_pool(s) for s in specs)
    ):
        raise PlanError(
            "the dataset's own pools are used in-process only; run without --api, or with --pool retriever"
        )
    benchmark = request.benchmark or guess_benchmark(request.dataset, dataset.items, dataset.format)
    manifest = ws.merge_manifest(
        Manifest(
            dataset=str(request.dataset),
            format=dataset.format,
            limit=request.limit,
            select=request.select,
            primary=request.primary,
            runs=specs,
            judge_model=request.judge_model,
            problems=[str(p) for p in dataset.problems],
            compare=list(request.compare) + [(s.budget_of, s.label) for s in specs if s.budget_of],
            preset=request.preset,
            benchmark=benchmark,
            pool_source=pool_source,
            pool_items_dropped=dataset.pool_items_dropped,
        )
    )
    ws.save_items(dataset.items)
    if request.provenance is not None:
        run = {
            "cache": request.cache if batch_client is None else "off",
            "bootstrap_seed": request.bootstrap_seed,
        }
        log_provenance(ws, {**request.provenance, "run": run})
    options = EvalOptions(
        concurrency=request.concurrency,
        primary=request.primary,
        max_consecutive_failures=request.max_consecutive_failures,
        progress=request.progress,
        pool_source=pool_source,
    )
    if batch_client is not None:
        tallies = await run_via_api(
            ws,
            dataset.items,
            specs,
            batch_client,
            judge=judge,
            options=options,
            poll_interval_s=poll_interval_s,
        )
    else:
        if models is None:
            raise PlanError("in-process evaluation needs the LLM role models")
        tallies = await run_in_process(
            ws, dataset.items, specs, models, pool_builder=pool_builder, judge=judge, options=options
        )
    if judge is not None:
        await judge_pass(ws, dataset.items, labels, judge, request.primary)
    report = build_report(
        ws,
        manifest,
        dataset.items,
        report_labels,
        compare=manifest.compare,
        samples=request.bootstrap_samples,
        seed=request.bootstrap_seed,
        plots=request.plots,
    )
    return EvalOutcome(dataset, manifest, labels, tallies, report)


def resolve_pool_source(requested: str, dataset: Dataset) -> PoolSource:
    """``auto`` is the dataset's own pools when it has any (the paper's inputs), else the retriever."""
    if requested not in ("auto", "file", "retriever"):
        raise PlanError(f"--pool must be auto, file or retriever, not {requested!r}")
    if requested == "file" and not dataset.items_with_pools:
        raise PlanError(f"--pool file: {dataset.path} carries no knowledge pools ({dataset.format} format)")
    if requested == "auto":
        return "file" if dataset.items_with_pools else "retriever"
    return "file" if requested == "file" else "retriever"


def rebuild_report(
    out: Path,
    labels: Sequence[str] | None = None,
    *,
    compare: Sequence[tuple[str, str]] = (),
    samples: int = 10_000,
    seed: int = 0,
    plots: bool = True,
) -> dict[str, Any]:
    """Recompute metrics, report and plots from an output folder alone (no LLM, no dataset)."""
    ws = Workspace(out)
    manifest = ws.load_manifest()
    if manifest is None:
        raise PlanError(f"{out} holds no evaluation (no eval.json)")
    chosen = list(labels) if labels else [r.label for r in manifest.runs]
    pairs = list(compare) or list(manifest.compare)  # the pairs of the run unless new ones are given
    check_compare(pairs, [r.label for r in manifest.runs])
    return build_report(
        ws, manifest, ws.load_items(), chosen, compare=pairs, samples=samples, seed=seed, plots=plots
    )

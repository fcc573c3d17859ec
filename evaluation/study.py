"""Running an experiment file's cells and writing its study report.

Each cell is an ordinary results folder: its ``[[runs]]`` are ``parley eval`` requests run in order
into it, so an interrupted study resumes where it stopped (run the same command: finished cells and
items are skipped, failed items retried). Cells that share a dataset and a model share one set of
dependencies (the model, the pools, the call cache): ``group_cells`` says which, and the runner
prepares each group once.

The report (``study.json``, ``study.md``, ``plots/study_accuracy.png``): every run of every cell with
its accuracy and a 95 % CI, tokens and seconds per question, the paired difference against the study's
baseline (bootstrap over the questions both finished), and whether the cells' provenance differs in a
way that decides the answers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.config import KNOWLEDGE_FREE
from evaluation.experiment import Cell, Experiment
from evaluation.harness import EvalOutcome, EvalRequest, plan_request, rebuild_report
from evaluation.plots import _pyplot, _save
from evaluation.provenance import differences, load_provenance
from evaluation.report import compare_runs
from evaluation.store import ResultRecord, Workspace
from evaluation.suite import get_suite, write_suite_report
from evaluation.suite_report import accuracy_ci, cost_per_question

Evaluate = Callable[..., Awaitable[EvalOutcome]]
Progress = Callable[[str], None]


def group_cells(experiment: Experiment) -> list[list[Cell]]:
    """The cells in file order, grouped by (dataset, model): each group runs on one prepared runner."""
    groups: dict[tuple[str, str | None], list[Cell]] = {}
    for cell in experiment.cells:
        key = (cell.dataset.name, cell.model.name if cell.model is not None else None)
        groups.setdefault(key, []).append(cell)
    return list(groups.values())


def representative(cells: Sequence[Cell]) -> EvalRequest:
    """The request the in-process runner prepares a group's dependencies for: one that reads a pool if
    any does (so the retriever is opened), on the most questions."""
    requests = [r for cell in cells for r in cell.requests]
    reading = [r for r in requests if any(s.protocol not in KNOWLEDGE_FREE for s in plan_request(r))]
    return (reading or requests)[0]


async def run_cells(
    cells: Sequence[Cell],
    evaluate: Evaluate,
    *,
    provenance: dict[str, Any] | None,
    progress: Progress,
    position: int,
    total: int,
    interleave: int | None = None,
    **deps: Any,
) -> list[EvalOutcome]:
    """Run (or resume) each cell's requests in order with one set of dependencies; with ``interleave``
    (questions per step), every cell's requests advance that many questions per step instead."""
    if interleave is not None:
        return await _interleaved(cells, evaluate, provenance, progress, position, total, interleave, **deps)
    outcomes = []
    for offset, cell in enumerate(cells):
        progress(f"cell {position + offset}/{total}: {cell.label} → {cell.folder}")
        for request in cell.requests:
            outcomes.append(await evaluate(replace(request, provenance=provenance), **deps))
    return outcomes


async def _interleaved(
    cells: Sequence[Cell],
    evaluate: Evaluate,
    provenance: dict[str, Any] | None,
    progress: Progress,
    position: int,
    total: int,
    step: int,
    **deps: Any,
) -> list[EvalOutcome]:
    """Step k runs every request on its first k × ``step`` questions (a resumed step skips what is done),
    until each has reached its own limit or the end of its dataset: at any interruption the cells hold
    the same leading questions, so they pair on all of them."""
    last: dict[tuple[int, int], EvalOutcome] = {}
    finished: set[tuple[int, int]] = set()
    reach = step
    while len(finished) < sum(len(cell.requests) for cell in cells):
        for offset, cell in enumerate(cells):
            for r, request in enumerate(cell.requests):
                if (offset, r) in finished:
                    continue
                limit = reach if request.limit is None else min(reach, request.limit)
                progress(
                    f"cell {position + offset}/{total}: {cell.label} → {cell.folder}, questions 1–{limit}"
                )
                outcome = await evaluate(replace(request, provenance=provenance, limit=limit), **deps)
                last[(offset, r)] = outcome
                if limit == request.limit or len(outcome.dataset.items) < limit:
                    finished.add((offset, r))
        reach += step
    return [last[key] for key in sorted(last)]


# --- the report ---------------------------------------------------------------------------------------


def _ok(results: dict[str, ResultRecord]) -> list[ResultRecord]:
    return [r for r in results.values() if r.status == "ok" and r.scores is not None]


def _pairs(
    experiment: Experiment, ids: Sequence[str], labels_by_cell: dict[str, list[str]]
) -> list[tuple[str, str]]:
    """(baseline, run) pairs: a CELL/LABEL baseline against every other run; a LABEL baseline against
    the other runs of each cell holding it (else the first cell that does, on the same dataset);
    no baseline: each cell's first run against the others of that cell."""
    baseline = experiment.spec.study.baseline
    pairs: list[tuple[str, str]] = []
    if baseline is not None and "/" in baseline:
        return [(baseline, run_id) for run_id in ids if run_id != baseline]
    for cell in experiment.cells:
        labels = labels_by_cell[cell.label]
        if not labels:
            continue
        if baseline is None:
            reference = f"{cell.label}/{labels[0]}"
        elif baseline in labels:
            reference = f"{cell.label}/{baseline}"
        else:
            holder = next(
                (
                    c
                    for c in experiment.cells
                    if c.dataset.name == cell.dataset.name and baseline in labels_by_cell[c.label]
                ),
                None,
            )
            if holder is None:
                continue
            reference = f"{holder.label}/{baseline}"
        pairs += [
            (reference, f"{cell.label}/{label}") for label in labels if f"{cell.label}/{label}" != reference
        ]
    return pairs


def rebuild_cell_reports(experiment: Experiment, *, plots: bool = True) -> list[Path]:
    """Each cell's own report (``metrics.json``, ``report.md``) from every result it holds, as the study
    report reads them: a study stopped mid-step leaves a cell's report on the step it last finished.
    Returns the folders written (a cell that has not started has none)."""
    study = experiment.spec.study
    written = []
    for cell in experiment.cells:
        if (cell.folder / "eval.json").exists():
            rebuild_report(
                cell.folder, samples=study.bootstrap_samples, seed=study.bootstrap_seed, plots=plots
            )
            written.append(cell.folder)
    return written


def study_report(experiment: Experiment, *, plots: bool = True) -> dict[str, Any]:
    """``study.json``, ``study.md`` and the plot from the cells' folders (what has finished so far)."""
    study = experiment.spec.study
    samples, seed = study.bootstrap_samples, study.bootstrap_seed
    results: dict[str, dict[str, ResultRecord]] = {}
    orders: dict[str, list[str]] = {}
    labels_by_cell: dict[str, list[str]] = {}
    runs: list[dict[str, Any]] = []
    provenance: dict[str, dict[str, Any]] = {}
    for cell in experiment.cells:
        ws = Workspace(cell.folder)
        manifest = ws.load_manifest()
        labels = [r.label for r in manifest.runs] if manifest is not None else []
        labels_by_cell[cell.label] = labels
        order = [it.id for it in ws.load_items()]
        records = load_provenance(cell.folder)
        if records:
            provenance[cell.label] = records[-1]
        for label in labels:
            run_id = f"{cell.label}/{label}"
            recs = ws.load_results(label)
            results[run_id] = recs
            orders[run_id] = order
            spec = next(s for s in manifest.runs if s.label == label)  # type: ignore[union-attr]
            ok = _ok(recs)
            acc, low, high = accuracy_ci(
                [r.scores.correct for r in ok if r.scores], samples=samples, seed=seed
            )
            runs.append(
                {
                    "id": run_id,
                    "cell": cell.label,
                    "label": label,
                    "protocol": spec.protocol,
                    "dataset": cell.dataset.name,
                    "model": cell.model.name if cell.model is not None else None,
                    "grid": cell.grid,
                    "seed": cell.seed,
                    "folder": str(cell.folder.relative_to(experiment.out))
                    if cell.folder != experiment.out
                    else ".",
                    "n": len(ok),
                    "failed": sum(1 for r in recs.values() if r.status == "failed"),
                    "accuracy": acc,
                    "ci_low": low,
                    "ci_high": high,
                    **cost_per_question(ok),
                    "cached_calls_per_q": (sum(r.cached_calls for r in ok) / len(ok)) if ok else None,
                }
            )
    ids = [r["id"] for r in runs]
    comparisons = []
    for a, b in _pairs(experiment, ids, labels_by_cell):
        if a not in results or b not in results:
            continue
        order = [i for i in orders[b] if i in set(orders[a])]
        comparisons.append(compare_runs(a, b, results, order, samples=samples, seed=seed))
    report: dict[str, Any] = {
        "study": study.name,
        "description": study.description,
        "file": str(experiment.path),
        "file_sha256": experiment.sha256,
        "out": str(experiment.out),
        "primary": study.primary,
        "baseline": study.baseline,
        "axes": list(experiment.spec.grid),
        "cells": [
            {
                "label": c.label,
                "folder": str(c.folder),
                "grid": c.grid,
                "seed": c.seed,
                "dataset": c.dataset.name,
            }
            for c in experiment.cells
        ],
        "bootstrap": {"samples": samples, "seed": seed, "level": 0.95},
        "runs": runs,
        "comparisons": comparisons,
        "provenance_differences": provenance_differences(provenance),
    }
    out = experiment.out
    out.mkdir(parents=True, exist_ok=True)
    if plots and any(r["accuracy"] is not None for r in runs):
        report["plot"] = str(study_plot(report, out / "plots" / "study_accuracy.png").relative_to(out))
    if study.suite_report is not None:
        report["suite_reports"] = write_suite_reports(experiment, study.suite_report, labels_by_cell, plots)
    (out / "study.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "study.md").write_text(render_study(report), encoding="utf-8")
    return report


def write_suite_reports(
    experiment: Experiment, name: str, labels_by_cell: dict[str, list[str]], plots: bool
) -> list[str]:
    """The named suite's own report (``suite.md``, its verdict and the papers' figures) in each cell
    that has runs; returns the folders written."""
    suite = get_suite(name)
    written = []
    for cell in experiment.cells:
        labels = labels_by_cell[cell.label]
        if labels:
            study = experiment.spec.study
            write_suite_report(
                Workspace(cell.folder),
                suite,
                labels=labels,
                samples=study.bootstrap_samples,
                seed=study.bootstrap_seed,
                plots=plots,
            )
            written.append(str(cell.folder))
    return written


def provenance_differences(by_cell: dict[str, dict[str, Any]]) -> list[str]:
    """What differs, in what decides the answers, between the first cell's provenance and each other's
    (a grid over models differs on purpose; a changed commit or index between cells is a warning)."""
    items = list(by_cell.items())
    if len(items) < 2:
        return []
    first_label, first = items[0]
    out = []
    for label, record in items[1:]:
        for difference in differences(first, record):
            out.append(f"{label} vs {first_label}: {difference}")
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def render_study(report: dict[str, Any]) -> str:
    lines = [f"# Study {report['study']}", ""]
    if report["description"]:
        lines += [report["description"], ""]
    lines += [
        f"From `{report['file']}` (sha256 `{report['file_sha256'][:16]}…`): {len(report['cells'])} cells, "
        f"{len(report['runs'])} runs. Accuracy is {report['primary']}; CIs are 95 % percentile bootstrap "
        f"({report['bootstrap']['samples']} resamples, seed {report['bootstrap']['seed']}), differences "
        "paired over the questions both runs finished.",
        "",
        "## Runs",
        "",
        "| run | n | failed | accuracy % [95 % CI] | tokens / q | s / q | replayed calls / q |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in report["runs"]:
        tokens = "–" if r["tokens_per_q"] is None else f"{r['tokens_per_q']:,.0f}"
        secs = "–" if r["seconds_per_q"] is None else f"{r['seconds_per_q']:.1f}"
        cached = "–" if r["cached_calls_per_q"] is None else f"{r['cached_calls_per_q']:.1f}"
        ci = f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]" if r["accuracy"] is not None else ""
        accuracy = f"{_pct(r['accuracy'])} {ci}"
        lines.append(f"| {r['id']} | {r['n']} | {r['failed']} | {accuracy} | {tokens} | {secs} | {cached} |")
    lines += ["", "## Against the baseline", ""]
    if not report["comparisons"]:
        lines.append("No pair of runs finished questions in common yet.")
    else:
        lines += [
            "| baseline | run | n | difference, points [95 % CI] | baseline better / run better |",
            "|---|---|---:|---|---|",
        ]
        for c in report["comparisons"]:
            if not c["n"]:
                lines.append(f"| {c['a']} | {c['b']} | 0 | – | – |")
                continue
            note = "" if c["significant"] else " (may be noise)"
            diff = f"{100 * c['diff']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]{note}"
            lines.append(f"| {c['a']} | {c['b']} | {c['n']} | {diff} | {c['a_better']} / {c['b_better']} |")
    if report.get("plot"):
        lines += ["", f"![accuracy per run]({report['plot']})"]
    lines += ["", "## Provenance", ""]
    if report["provenance_differences"]:
        lines.append("The cells were not all produced alike (what decides the answers differs):")
        lines += [f"- {d}" for d in report["provenance_differences"]]
    else:
        lines.append("Every cell records the same code, lock, model and index (or only one cell has run).")
    lines.append("")
    return "\n".join(lines)


def study_plot(report: dict[str, Any], path: Path) -> Path:
    """Each run's accuracy with its 95 % CI, one row per run, grouped by cell."""
    plt = _pyplot()
    runs = [r for r in report["runs"] if r["accuracy"] is not None]
    fig, ax = plt.subplots(figsize=(8.5, 0.38 * len(runs) + 1.6))
    protocols = sorted({r["label"] for r in runs})
    colours = {label: f"C{i % 10}" for i, label in enumerate(protocols)}
    for y, r in enumerate(runs):
        x = 100 * r["accuracy"]
        err = [[x - 100 * r["ci_low"]], [100 * r["ci_high"] - x]]
        ax.errorbar([x], [y], xerr=err, fmt="o", capsize=3, color=colours[r["label"]])
    ax.set_yticks(range(len(runs)))
    ax.set_yticklabels([f"{r['id']} (n={r['n']})" for r in runs], fontsize=7)
    ax.invert_yaxis()
    top = max((100 * r["ci_high"] for r in runs), default=0.0)
    ax.set_xlim(0, min(100.0, top + 10))
    ax.set_xlabel(f"accuracy ({report['primary']}), % with 95 % CI")
    ax.set_title(f"Study {report['study']}", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(plt, fig, path, dpi=120)

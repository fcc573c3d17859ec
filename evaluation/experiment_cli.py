"""``parley eval --experiment FILE``: validate the whole file, run its cells (resumable), write the
study report. The harness and the engine load inside the functions, as in ``evaluation.cli``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from evaluation.cli_args import default_prompt_style
from evaluation.settings import EvalSettings


def file_owned(options: dict[str, Any]) -> dict[str, Any]:
    """The command-line options an experiment file takes the place of, by their flag names."""
    return {
        "dataset": options["dataset"],
        "protocols": options["protocols"],
        "preset": options["preset"],
        "suite": options["suite"],
        "config": options["config"],
        "set": options["set_"],
        "limit": options["limit"],
        "slice": options["select"],
        "prompt-styles": options["prompt_styles"],
        "same-budget": options["same_budget"],
        "api": options["api"],
        "rescore": options["rescore"],
    }


def run_experiment(
    path: Path,
    out: Path | None,
    given: list[str],
    report_only: bool,
    cache: Literal["on", "off", "only"],
    plots: bool,
    progress: bool,
    settings: EvalSettings,
    console: Any,
    evaluate_one: Any,
) -> dict[str, Any]:
    """``parley eval --experiment``: refuse the options the file sets (``given``), load and check
    ``path`` (nothing runs when it is wrong), run every cell unless ``report_only``, then write and
    print the study report. ``evaluate_one(request, evaluate_fn)`` runs one prepared group (the CLI's
    in-process wiring)."""
    if given:
        hint = ", ".join(f"--{g}" for g in given)
        raise typer.BadParameter(f"the experiment file sets these; drop {hint}", param_hint="--experiment")
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.experiment import load_experiment
    from evaluation.harness import PlanError
    from evaluation.study import rebuild_cell_reports, study_report

    if settings.api_url:
        raise PlanError("an experiment runs in-process; unset PARLEY_EVAL_API_URL")
    experiment = load_experiment(
        path,
        out=out,
        style_for=lambda overrides: default_prompt_style(
            settings.prompt_style, api=False, llm_overrides=overrides
        ),
    )
    cells = experiment.cells
    runs = len(experiment.run_ids())
    console.print(
        f"study {experiment.spec.study.name}: {len(cells)} cell(s), {runs} run(s) → {experiment.out}"
        + ("" if report_only else f" (call cache: {cache})")
    )
    if report_only:
        rebuild_cell_reports(experiment, plots=plots)
    else:
        check_endpoints(experiment)
        run_groups(experiment, cache, plots, progress, console, evaluate_one)
    report = study_report(experiment, plots=plots)
    print_study(console, report, Path(report["out"]))
    return report


def run_groups(
    experiment: Any,
    cache: Literal["on", "off", "only"],
    plots: bool,
    progress: bool,
    console: Any,
    evaluate_one: Any,
) -> None:
    """Each group of cells (one dataset and model) as one prepared in-process evaluation."""
    # lazy: `parley --help` must not load the harness and numpy
    from dataclasses import replace

    from evaluation.harness import evaluate as harness_evaluate
    from evaluation.study import group_cells, representative, run_cells

    cells = experiment.cells
    position = 1
    for group in group_cells(experiment):
        # Every request of the group gets the cache mode and the progress setting of this command.
        group = [
            replace(
                cell,
                requests=tuple(
                    replace(r, cache=cache, plots=plots, progress=progress) for r in cell.requests
                ),
            )
            for cell in group
        ]
        start = position

        async def evaluate_fn(
            prepared: Any, _group: list[Any] = group, _start: int = start, **deps: Any
        ) -> Any:
            return await run_cells(
                _group,
                harness_evaluate,
                provenance=prepared.provenance,
                progress=lambda line: console.print(f"[bold]{line}[/bold]"),
                position=_start,
                total=len(cells),
                interleave=experiment.spec.study.interleave,
                **deps,
            )

        evaluate_one(replace(representative(group), cache=cache), evaluate_fn)
        position += len(group)


def check_endpoints(experiment: Any) -> None:
    """Every endpoint the study names serves its model (``ModelNotServed`` otherwise), before the first
    cell runs: a typo in the last model's name must not surface hours in."""
    # lazy: `parley --help` must not load the LLM room
    from services.llm import LLMSettings, check_models_served

    for model in experiment.spec.models:
        overrides = model.llm_overrides()
        if overrides is not None and overrides.get("base_url"):
            check_models_served(LLMSettings(**overrides))


def print_study(console: Any, report: dict[str, Any], out: Path) -> None:
    """The study's runs, the comparisons that exclude 0, and where the report is."""
    for r in report["runs"]:
        acc = "–" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}%"
        ci = "" if r["accuracy"] is None else f" [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]"
        console.print(f"  {r['id']}: {acc}{ci} (n={r['n']}, failed {r['failed']})")
    for c in report["comparisons"]:
        if c["n"]:
            note = "" if c["significant"] else " (may be noise)"
            console.print(
                f"  {c['b']} − {c['a']}: {100 * c['diff']:+.1f} points "
                f"[{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] over {c['n']}{note}"
            )
    for line in report["provenance_differences"]:
        console.print(f"[yellow]warning:[/yellow] cells differ in provenance: {line}")
    console.print(f"study report: {out / 'study.md'}")

"""What ``parley eval`` prints: the summary table of an evaluation or a suite, its warnings and
comparisons, where the reports are, and ``--list-presets``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from evaluation.presets import PRESETS


def print_outcome(console: Any, outcome: Any, out: Path) -> None:
    """Dataset lines skipped, pool entries dropped, the summary and the items to retry."""
    for problem in outcome.dataset.problems:
        console.print(f"[yellow]dataset {problem}[/yellow] (skipped)")
    if outcome.dataset.pool_items_dropped:
        console.print(
            f"[yellow]{outcome.dataset.pool_items_dropped} pool entries without text dropped[/yellow] "
            f"(pools of {outcome.dataset.items_with_pools} items)"
        )
    print_summary(console, outcome.report, out)
    failed = sum(t.failed for t in outcome.tallies)
    if failed:
        console.print(f"[yellow]{failed} item(s) failed[/yellow]; run the same command again to retry them.")


def print_suite(console: Any, report: dict[str, Any], out: Path) -> None:
    """The suite's runs with their CIs, the verdict and where the report is."""
    # lazy: report_markdown brings numpy, not needed for `parley --help`
    from evaluation.report_markdown import fmt

    table = _table(
        f"suite {report['suite']} · accuracy = {report['primary']}",
        ("run", "n", "acc%", "95% CI", "tok/q", "s/q", "unparseable%"),
        [
            (
                r["label"],
                str(r["n"]),
                fmt(r["accuracy"], True),
                f"[{fmt(r['ci_low'], True)}, {fmt(r['ci_high'], True)}]",
                fmt(r["tokens_per_q"], digits=0),
                fmt(r["seconds_per_q"], digits=1),
                fmt(r["unparseable"], True),
            )
            for r in report["runs"]
        ],
    )
    console.print(table)
    for line in report["verdict"]:
        console.print(line)
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print(
        f"report: {out / 'suite.md'} · {out / 'suite.json'} · plot: {out / 'plots' / 'cost_accuracy.png'}"
    )


def print_presets() -> None:
    """``--list-presets``: name, what it runs, the paper and where its settings and figures come from."""
    for p in PRESETS.values():
        typer.echo(f"{p.name}: {p.summary}")
        typer.echo(f"    paper: {p.paper}")
        typer.echo(f"    source: {p.source}")
        typer.echo(f"    metric: {p.metric}; benchmarks with figures: {', '.join(p.benchmarks)}")
        typer.echo(f"    baselines (--protocols): {', '.join(p.baselines)}")
        for d in p.deviations:
            typer.echo(f"    differs: {d}")


def print_summary(console: Any, report: dict[str, Any], out: Path) -> None:
    """Each run's scores, the unparseable-reply warnings and the paired differences, then where the
    report is: what a user reads before opening report.md."""
    # lazy: report_markdown brings numpy, not needed for `parley --help`
    from evaluation.report_markdown import fmt, unparseable_warnings

    table = _table(
        f"{report['items']} items · accuracy = {report['primary']}",
        ("run", "ok", "fail", "acc%", "F1%", "Co2%", "Cons%", "rnds", "tok/q", "s/q"),
        [
            (
                r["label"],
                str(r["ok"]),
                str(r["failed"]),
                *(fmt(r[key], True) for key in ("accuracy", "f1", "co2", "cons")),
                fmt(r["avg_rounds"], digits=2),
                fmt(r["tokens_per_q"], digits=0),
                fmt(r["seconds_per_q"], digits=2),
            )
            for r in report["runs"]
        ],
    )
    console.print(table)
    for warning in unparseable_warnings(report):
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for c in report["comparisons"]:
        if not c["n"]:
            console.print(f"{c['b']} − {c['a']}: no item finished in both runs yet")
            continue
        verdict = "[green]real[/green]" if c["significant"] else "[dim]may be noise[/dim]"
        console.print(
            f"{c['b']} − {c['a']}: {100 * c['diff']:+.1f} pp, 95% CI [{100 * c['ci_low']:+.1f}, "
            f"{100 * c['ci_high']:+.1f}] over {c['n']} items → {verdict}"
        )
    console.print(f"report: {out / 'report.md'} · metrics: {out / 'metrics.json'}")


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Any:
    """A Rich table whose first column (the run) is left-aligned and never wrapped, numbers right."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col == columns[0] else "right", no_wrap=col == columns[0])
    for row in rows:
        table.add_row(*row)
    return table


def print_rescore(console: Any, rescore: Any) -> None:
    """Each run's accuracy under the metric its answers were scored with and under the new one."""
    table = Table(title=f"scored again: {rescore.before} → {rescore.after} (no model ran)")
    for col in ("run", "answers", rescore.before, rescore.after, "credit changed"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for run in rescore.runs:
        table.add_row(
            run.label,
            str(run.scored),
            f"{run.correct_before:.1%}",
            f"{run.correct_after:.1%}",
            str(run.changed),
        )
    console.print(table)

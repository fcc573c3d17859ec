"""What ``parley eval`` does with a results folder without running anything: rebuild its report (or
its suite's), score its answers again, export it. The harness loads inside the functions, so
``parley --help`` stays instant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from evaluation.cli_console import print_suite, print_summary


def report_only(
    console: Console,
    out: Path,
    suite: str | None,
    pairs: list[tuple[str, str]],
    samples: int,
    seed: int,
    plots: bool,
) -> None:
    """Rebuild a folder's report (or its suite's) from what is stored; run nothing."""
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.harness import rebuild_report

    if suite is not None:
        print_suite(console, suite_report_only(suite, out, samples, seed, plots), out)
        return
    report = rebuild_report(out, compare=pairs, samples=samples, seed=seed, plots=plots)
    print_summary(console, report, out)


def export(console: Console, out: Path, dest: Path) -> None:
    # lazy: pyarrow loads only for an export
    from evaluation.export import export_folder

    counts = export_folder(out, dest)
    rows = ", ".join(f"{n} {name}" for name, n in counts.items())
    console.print(f"exported {rows} rows to {dest} (Parquet; README.md names the tables for `datasets`)")


def rescore(out: Path, primary: str) -> Any:
    # lazy: `parley --help` must not load the store and its models
    from evaluation.rescore import rescore_workspace
    from evaluation.store import Workspace, WorkspaceError

    if not (out / "eval.json").exists():
        raise WorkspaceError(f"{out} holds no evaluation (no eval.json)")
    return rescore_workspace(Workspace(out), primary)  # type: ignore[arg-type]


def suite_report_only(name: str, out: Path, samples: int, seed: int, plots: bool) -> dict[str, Any]:
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.harness import PlanError
    from evaluation.store import Workspace
    from evaluation.suite import get_suite, write_suite_report

    ws = Workspace(out)
    manifest = ws.load_manifest()
    if manifest is None:
        raise PlanError(f"{out} holds no evaluation (no eval.json)")
    labels = [r.label for r in manifest.runs]
    return write_suite_report(ws, get_suite(name), labels=labels, samples=samples, seed=seed, plots=plots)

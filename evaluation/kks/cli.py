"""``parley kks …``: generate and check Knight–Knave–Spy puzzle datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from evaluation.kks.dataset import load_kks, write_jsonl
from evaluation.kks.generator import generate_dataset
from evaluation.kks.puzzle import solve

kks_app = typer.Typer(name="kks", help="Knight-Knave-Spy puzzles (Wu et al.): generate and check datasets.")


def parse_sizes(spec: str) -> list[int]:
    """``4-9`` or ``4,6,8`` into a list of sizes; a readable error otherwise."""
    try:
        if "-" in spec:
            lo, hi = (int(x) for x in spec.split("-", 1))
            sizes = list(range(lo, hi + 1))
        else:
            sizes = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"sizes must look like 4-9 or 4,6,8, got {spec!r}") from exc
    if not sizes or min(sizes) < 3 or max(sizes) > 12:
        raise typer.BadParameter("sizes must be between 3 and 12 players")
    return sizes


@kks_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option("--out", help="JSONL file to write")],
    sizes: Annotated[str, typer.Option("--sizes", help="player counts, e.g. 4-9 or 4,6,8")] = "4-9",
    per_size: Annotated[int, typer.Option("--per-size", min=1, max=10_000)] = 10,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Write puzzles that each have exactly one solution (checked by the exact solver)."""
    size_list = parse_sizes(sizes)
    total = len(size_list) * per_size
    records = []
    with Progress() as progress:
        task = progress.add_task("generating puzzles", total=total)
        for puzzle in generate_dataset(size_list, per_size, seed):
            records.append(puzzle.record())
            progress.advance(task)
    count = write_jsonl(records, out)
    typer.echo(f"wrote {count} puzzles (sizes {sizes}, {per_size} each, seed {seed}) to {out}")


@kks_app.command("check")
def check(path: Annotated[Path, typer.Argument(help="JSONL puzzle file")]) -> None:
    """Re-solve every puzzle of a file and report any without exactly one solution."""
    bad = 0
    records = load_kks(path)
    for rec in records:
        solutions = solve(rec["statements"], limit=2)
        if len(solutions) != 1 or dict(zip(rec["players"], solutions[0], strict=True)) != rec["solution"]:
            bad += 1
            typer.echo(f"{rec['id']}: {len(solutions)} solution(s) found", err=True)
    typer.echo(f"{len(records) - bad} of {len(records)} puzzles have exactly the stated solution")
    if bad:
        raise typer.Exit(1)

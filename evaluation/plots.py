"""PNG plots of an evaluation report and of a suite's cost against accuracy (matplotlib, Agg backend:
no display needed on servers)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    # lazy: matplotlib (~160 ms) loads only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the Agg backend is chosen: no display on servers

    return plt


def _save(plt: Any, fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lay the figure out, write it to ``path`` and free it (pyplot keeps every open figure)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write_plots(report: dict[str, Any], folder: Path) -> list[Path]:
    """Accuracy vs output tokens, accuracy by round, and selection behaviour; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [
        accuracy_vs_tokens(report, folder / "accuracy_vs_tokens.png"),
        accuracy_by_round(report, folder / "accuracy_by_round.png"),
        selection_behaviour(report, folder / "selection.png"),
    ]
    if any(row["parley_value"] is not None for row in report.get("published") or []):
        written.append(published_comparison(report, folder / "published.png"))
    return written


def published_comparison(report: dict[str, Any], path: Path) -> Path:
    """Parley's value next to each published figure it is compared with (one pair of bars per row)."""
    plt = _pyplot()
    rows = [r for r in report["published"] if r["parley_value"] is not None]
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * len(rows) + 1.6))
    ys = list(range(len(rows)))
    paper = [100 * r["paper_value"] for r in rows]
    parley = [100 * r["parley_value"] for r in rows]
    ax.barh([y + 0.2 for y in ys], paper, height=0.4, color="tab:gray", label="paper (its model)")
    ax.barh([y - 0.2 for y in ys], parley, height=0.4, color="tab:blue", label="Parley (its model)")
    ax.set_yticks(ys)
    ax.set_yticklabels(
        [f"{r['run']} · {r['metric']}\nvs {r['paper_method']}, {r['paper_model']}" for r in rows], fontsize=7
    )
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("%")
    models = sorted({m for r in rows for m in r["parley_models"]})
    ax.set_title(f"{report.get('benchmark')}: Parley ({', '.join(models) or 'model unknown'}) vs the paper")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return _save(plt, fig, path)


def accuracy_vs_tokens(report: dict[str, Any], path: Path) -> Path:
    """Cost against quality: one point per run, output (completion) tokens per question on x."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    # One marker and colour per run, named in the legend: annotations collide when runs cluster, as
    # cheap single-agent runs do near the origin. Runs on the same point share one legend entry.
    points: dict[tuple[float, float], list[str]] = {}
    for run in report["runs"]:
        x, y = run["completion_tokens_per_q"], run["accuracy"]
        if x is None or y is None:
            continue
        points.setdefault((round(x, 1), round(100 * y, 1)), []).append(run["label"])
    markers = "osD^vP*Xh<>p"
    for i, ((x, y), labels) in enumerate(sorted(points.items(), key=lambda kv: kv[1])):
        ax.scatter([x], [y], s=55, marker=markers[i % len(markers)], label=", ".join(labels), alpha=0.85)
    if points:
        ax.legend(fontsize=8, loc="best")
    ax.set_ylim(-3, 103)
    ax.set_xlabel("output tokens per question")
    ax.set_ylabel(f"accuracy ({report['primary']}) %")
    ax.set_title("Accuracy against output tokens")
    ax.grid(alpha=0.3)
    return _save(plt, fig, path)


def accuracy_by_round(report: dict[str, Any], path: Path) -> Path:
    """Share of agents with a correct answer after each round (early stops carry their answer on)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    depth = 1
    for run in report["runs"]:
        curve = run["accuracy_by_round"]
        if not curve:
            continue
        depth = max(depth, len(curve))
        xs = list(range(1, len(curve) + 1))
        ax.plot(xs, [100 * v for v in curve], marker="o", label=run["label"])
    ax.set_ylim(-3, 103)
    ax.set_xticks(list(range(1, depth + 1)))
    ax.set_xlabel("debate round")
    ax.set_ylabel("agent answers correct %")
    ax.set_title("Accuracy by debate round")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return _save(plt, fig, path)


def selection_behaviour(report: dict[str, Any], path: Path) -> Path:
    """Three panels: [No Found] share, mean items selected per agent and round, sources chosen."""
    plt = _pyplot()
    runs = [r for r in report["runs"] if r["selection"]["steps"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    if not runs:
        for ax in axes:
            ax.axis("off")
        axes[1].text(0.5, 0.5, "no knowledge-selection steps in these runs", ha="center", va="center")
    else:
        labels = [r["label"] for r in runs]
        ax = axes[0]
        no_found = [100.0 * (r["selection"]["no_found_share"] or 0.0) for r in runs]
        bars = ax.bar(labels, no_found, color="tab:orange")
        ax.bar_label(bars, labels=[f"{v:.0f}%" for v in no_found], fontsize=8)
        ax.set_ylim(0, max(10.0, 1.15 * max(no_found)))
        ax.set_ylabel("% of selection steps")
        ax.set_title("[No Found] share")
        ax.tick_params(axis="x", rotation=30, labelsize=8)

        ax = axes[1]
        slots = sorted({k for r in runs for k in r["selection"]["mean_selected"]}, key=_slot_key)
        width = 0.8 / len(runs)
        for i, r in enumerate(runs):
            ys = [r["selection"]["mean_selected"].get(s, 0.0) for s in slots]
            ax.bar([j + i * width for j in range(len(slots))], ys, width=width, label=r["label"])
        ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(slots))])
        ax.set_xticklabels([_slot_label(s) for s in slots], fontsize=8, rotation=30)
        ax.set_ylabel("items selected (mean)")
        ax.set_title("Items selected per agent and round")
        ax.legend(fontsize=7)

        ax = axes[2]
        sources = sorted({s for r in runs for s in r["selection"]["sources"]})
        bottom = [0.0] * len(runs)
        for src in sources:
            counts = [float(r["selection"]["sources"].get(src, 0)) for r in runs]
            totals = [sum(r["selection"]["sources"].values()) or 1 for r in runs]
            shares = [100 * c / t for c, t in zip(counts, totals, strict=True)]
            ax.bar(labels, shares, bottom=bottom, label=src)
            bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
        ax.set_ylabel("% of selected items")
        ax.set_title("Sources chosen")
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        if sources:
            ax.legend(fontsize=7)
    return _save(plt, fig, path)


def _slot_key(slot: str) -> tuple[int, int]:
    r, a = slot[1:].split("a")
    return int(r), int(a)


def _slot_label(slot: str) -> str:
    r, a = _slot_key(slot)
    return f"R{r} A{a + 1}"


# A label line is 10 typographic points, about 1.6 accuracy points on the plot's usual 0–40 % axis; a
# label's name spans about a quarter of a decade of tokens.
LABEL_LINE_POINTS = 10
LABEL_LINE_ACCURACY = 1.6
LABEL_SPAN_DECADES = 0.25


def label_lift(placed: list[tuple[float, float]], x: float, y: float) -> int:
    """How many lines down a point's label goes so that it clears the labels already ``placed``
    (positions in log10 tokens and accuracy points, the label's own line included); records it."""
    lift = 0
    while any(
        abs(x - px) < LABEL_SPAN_DECADES
        and abs(y - LABEL_LINE_ACCURACY * lift - py) < 0.9 * LABEL_LINE_ACCURACY
        for px, py in placed
    ):
        lift += 1
    placed.append((x, y - LABEL_LINE_ACCURACY * lift))
    return lift


def cost_accuracy_plot(report: dict[str, Any], path: Path) -> Path:
    """Accuracy against tokens per question, one point per protocol, 95 % CI error bars."""
    # lazy: matplotlib (~160 ms) loads only when a plot is drawn
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plt = _pyplot()
    runs = [r for r in report["runs"] if r["accuracy"] is not None and r["tokens_per_q"]]
    fig, ax = plt.subplots(figsize=(9.5, 5))
    placed: list[tuple[float, float]] = []
    for r in runs:
        y = 100 * r["accuracy"]
        err = [[y - 100 * r["ci_low"]], [100 * r["ci_high"] - y]]
        marker = "s" if r["label"] in (report["reference"], report["vote"]) else "o"
        ax.errorbar(
            [r["tokens_per_q"]], [y], yerr=err, fmt=marker, capsize=4, label=f"{r['label']} (n={r['n']})"
        )
        # runs of like cost and accuracy (society and MAD) printed their names over each other
        lift = label_lift(placed, math.log10(r["tokens_per_q"]), y)
        ax.annotate(
            r["label"],
            (r["tokens_per_q"], y),
            textcoords="offset points",
            xytext=(6, 4 - LABEL_LINE_POINTS * lift),
            fontsize=8,
        )
    top = max((100 * r["ci_high"] for r in runs), default=0.0)
    ax.set_ylim(0, min(100.0, top + 10))
    ax.set_xscale("log")
    # plain numbers at 1, 2 and 5 of each decade: matplotlib's minor "3×10²" labels ran together
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("tokens per question (prompt + completion, log scale)")
    ax.set_ylabel(f"accuracy ({report['primary']}), % with 95 % CI")
    models = sorted({m for r in runs for m in r["models"]})
    ax.set_title(
        f"Suite {report['suite']}: cost and accuracy per protocol"
        + (f"\n{', '.join(models)}" if models else ""),
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    # beside the axes: inside, with nine runs, it covered the low-cost points' error bars
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(plt, fig, path, dpi=120)

"""Drawing a study's PNG with matplotlib, headless (the Agg backend) and imported only when a study
draws, so a study's other work and its tests need no display and no matplotlib."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, dpi: int = 120) -> Path:
    """Lay the figure out, write it to ``path`` and free it (a long study draws after every point)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def curves(
    path: Path,
    xs: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    log_x: bool = False,
    tick_every_x: bool = False,
    figsize: tuple[float, float] = (6, 4),
    markersize: float | None = None,
    legend_fontsize: float | None = None,
) -> Path:
    """One marked line per series over the same ``xs`` (answer-in-pool@k, recall@k); on a log axis, or
    with ``tick_every_x``, each x gets its own tick (the few pool sizes a study measured)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=figsize)
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name, **({"markersize": markersize} if markersize else {}))
    if log_x:
        ax.set_xscale("log")
    if log_x or tick_every_x:
        ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(**({"fontsize": legend_fontsize} if legend_fontsize else {}))
    return save(fig, path)


def figure(figsize: tuple[float, float], **subplots: Any) -> tuple[Any, Any]:
    """A new figure of ``figsize`` inches and its axes (``nrows``/``ncols`` and the like as for
    ``plt.subplots``)."""
    fig, axes = pyplot().subplots(figsize=figsize, **subplots)
    return fig, axes

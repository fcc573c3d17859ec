"""The papers' published figures, so a report can show Parley's number next to the paper's.

Each figure names the paper's method, the model that produced it, the metric, the value and the table
it is printed in. A report row is matched by benchmark (``--benchmark``, or guessed from the dataset
path) and method: the preset's own run is the paper's method (``Preset.name`` → ``MAIN_METHOD``), other
runs map by protocol to the paper's baselines (``BASELINE_METHODS``). The values are copied from the
papers in ``shared/papers/`` into ``published_figures.txt`` (a data file, one table per paper table)
and read as fractions (the papers print percentages or fractions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PublishedFigure:
    paper: str
    benchmark: str
    method: str
    model: str
    metric: str  # key of a report run: f1, judge_accuracy, accuracy, kks_strict
    value: float
    source: str


METRIC_NAMES = {
    "f1": "F1",
    "judge_accuracy": "GPT-4 score (Parley: LLM judge)",
    "accuracy": "accuracy",
    "kks_strict": "KKS Strict",
}


FIGURES_FILE = Path(__file__).with_name("published_figures.txt")


def read_figures(text: str) -> list[PublishedFigure]:
    """Figures from tables written as ``== paper | source | benchmark:metric …`` headers, each followed
    by ``model | method | v1 v2 …`` rows (one value per header column; ``-`` marks a cell the paper
    leaves empty). Percentages become fractions, so every figure compares with Parley's metrics."""
    out: list[PublishedFigure] = []
    paper = source = ""
    columns: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("=="):
            paper, source, header = (part.strip() for part in line[2:].split("|"))
            columns = [(col.partition(":")[0], col.partition(":")[2]) for col in header.split()]
            continue
        model, method, values = (part.strip() for part in line.split("|"))
        cells = values.split()
        if not columns or len(cells) != len(columns):
            raise ValueError(
                f"{paper or FIGURES_FILE.name}: {line!r} has {len(cells)} values for {len(columns)} columns"
            )
        for (benchmark, metric), cell in zip(columns, cells, strict=True):
            if cell == "-":
                continue
            value = float(cell)
            out.append(
                PublishedFigure(
                    paper, benchmark, method, model, metric, value / 100 if value > 1 else value, source
                )
            )
    return out


FIGURES: tuple[PublishedFigure, ...] = tuple(read_figures(FIGURES_FILE.read_text(encoding="utf-8")))

# Preset → (paper key, the paper's name for the preset's own method).
MAIN_METHOD: dict[str, tuple[str, str]] = {
    "madke": ("madke", "MADKE"),
    "mad-ciar": ("mad", "MAD"),
    "kks-wu": ("kks", "debate"),
    "madc": ("madc", "MAD+MADC"),
    "mallm-simple": ("mallm", "Simple Voting"),
    "mallm-ranked": ("mallm", "Ranked Voting"),
    "mallm-cumulative": ("mallm", "Cumulative Voting"),
    "mallm-approval": ("mallm", "Approval Voting"),
    "mallm-majority": ("mallm", "Majority Consensus"),
    "mallm-supermajority": ("mallm", "Supermajority Consensus"),
    "mallm-unanimity": ("mallm", "Unanimity Consensus"),
}
# Paper key → Parley protocol → the paper's name for that baseline.
BASELINE_METHODS: dict[str, dict[str, str]] = {
    "madke": {"single": "SP", "cot": "CoT", "self_consistency": "SC", "rag": "RAG", "society": "MAD"},
    "mad": {"single": "SP", "cot": "CoT", "self_consistency": "SC"},
    "kks": {},
    "mallm": {},
    "madc": {"cot": "Single CoT", "self_consistency": "SC", "society": "MAD"},
}

# Dataset path fragments → benchmark names (MADKE's data/<dataset>/…, BBH task names, file names).
_PATH_HINTS: tuple[tuple[str, str], ...] = (
    (r"mmlu[_-]?med", "mmlu-med"),
    (r"mmlu[_-]?pro", "mmlu-pro"),
    (r"triviaqa|tqa", "triviaqa"),
    (r"hotpot", "hotpotqa"),
    (r"2wiki|wikimultihop", "2wikimqa"),
    (r"fever", "fever"),
    (r"ciar|counterintuitive", "ciar"),
    (r"gpqa", "gpqa"),
    (r"strategyqa", "strategyqa"),
    (r"logical[_-]?deduction", "logical-deduction"),
    (r"geometric[_-]?shapes", "geometric-shapes"),
    (r"math[_-]?500", "math500"),
    (r"(?:^|[^a-z])mmlu(?:[^a-z]|$)", "mmlu"),
    (r"(?:^|[/_.-])nq(?:[/_.-]|$)|natural[_-]?questions", "nq"),
)


def guess_benchmark(dataset: str | Path, items: Iterable[Any] = (), fmt: str = "") -> str | None:
    """The benchmark a dataset file is, from its path (MADKE's ``data/nq/…``, ``CIAR.json``) or, for
    KKS puzzles, from the puzzles' size (ControlMAD's ``groundtruth/<players>.jsonl``)."""
    if fmt == "kks":
        sizes = {getattr(it, "meta", {}).get("difficulty") for it in items}
        if len(sizes) == 1:
            (size,) = sizes
            if isinstance(size, int):
                return f"kks-{size}"
        return None
    path = str(dataset).lower()
    for pattern, name in _PATH_HINTS:
        if re.search(pattern, path):
            return name
    return None


def method_for(preset: str | None, label: str, protocol: str) -> tuple[str, str] | None:
    """(paper, method) a report run stands for: the preset's own run, or a baseline by protocol."""
    if preset is None or preset not in MAIN_METHOD:
        return None
    paper, main = MAIN_METHOD[preset]
    if label == preset or label.startswith(f"{preset}-"):  # the preset's run, per prompt style
        return paper, main
    method = BASELINE_METHODS.get(paper, {}).get(protocol)
    return (paper, method) if method else None


def figures_for(paper: str, benchmark: str | None, method: str) -> list[PublishedFigure]:
    if benchmark is None:
        return []
    return [f for f in FIGURES if f.paper == paper and f.benchmark == benchmark and f.method == method]


def comparison_rows(
    preset: str | None, benchmark: str | None, runs: Sequence[dict[str, Any]], models: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """One row per (report run, published figure): Parley's value of the paper's metric next to it."""
    rows = []
    for run in runs:
        matched = method_for(preset, run["label"], run["protocol"])
        if matched is None:
            continue
        paper, method = matched
        for fig in figures_for(paper, benchmark, method):
            rows.append(
                {
                    "run": run["label"],
                    "parley_models": models.get(run["label"], []),
                    "parley_value": run.get(fig.metric),
                    "metric": fig.metric,
                    "paper_method": fig.method,
                    "paper_model": fig.model,
                    "paper_value": fig.value,
                    "source": fig.source,
                }
            )
    return rows

"""The papers' published figures, so a report can show Parley's number next to the paper's.

Each figure names the paper's method, the model that produced it, the metric, the value and the table
it is printed in. A report row is matched by benchmark (``--benchmark``, or guessed from the dataset
path) and method: the preset's own run is the paper's method (``Preset.name`` → ``MAIN_METHOD``), other
runs map by protocol to the paper's baselines (``BASELINE_METHODS``). The values are copied from the
papers in ``shared/papers/`` as fractions (the papers print percentages or fractions).
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


def _rows(
    paper: str, source: str, metric_by_column: Sequence[tuple[str, str]], text: str
) -> list[PublishedFigure]:
    """Figures from a table written as ``model | method | v1 v2 …`` lines, one value per column of
    ``metric_by_column`` (benchmark, metric); ``-`` marks a cell the paper leaves empty."""
    out = []
    for line in text.strip().splitlines():
        model, method, values = (part.strip() for part in line.split("|"))
        cells = values.split()
        if len(cells) != len(metric_by_column):
            raise ValueError(f"{paper}: {line!r} has {len(cells)} values for {len(metric_by_column)} columns")
        for (benchmark, metric), cell in zip(metric_by_column, cells, strict=True):
            if cell == "-":
                continue
            value = float(cell)
            out.append(
                PublishedFigure(
                    paper, benchmark, method, model, metric, value / 100 if value > 1 else value, source
                )
            )
    return out


# MADKE Table 2 (open-domain datasets; the paper prints fractions "in %") and Table 4 (MMLU-Med).
_MADKE_T2_COLUMNS = (
    ("triviaqa", "f1"),
    ("triviaqa", "judge_accuracy"),
    ("nq", "f1"),
    ("nq", "judge_accuracy"),
    ("hotpotqa", "f1"),
    ("hotpotqa", "judge_accuracy"),
    ("2wikimqa", "f1"),
    ("2wikimqa", "judge_accuracy"),
    ("fever", "accuracy"),
)
_MADKE_T2 = """
GPT-4-Turbo | SP | 0.828 0.902 0.459 0.692 0.472 0.566 0.265 0.284 0.608
GPT-3.5-Turbo | SP | 0.761 0.778 0.390 0.532 0.331 0.384 0.190 0.210 0.548
GPT-3.5-Turbo | CoT | 0.715 0.772 0.418 0.588 0.333 0.410 0.165 0.190 0.556
GPT-3.5-Turbo | SC | 0.756 0.818 0.431 0.622 0.342 0.408 0.175 0.206 0.560
GPT-3.5-Turbo | RAG | 0.768 0.824 0.450 0.436 0.423 0.498 0.204 0.228 0.646
GPT-3.5-Turbo | MAD | 0.712 0.798 0.401 0.648 0.287 0.394 0.133 0.186 0.548
GPT-3.5-Turbo | MADKE | 0.728 0.830 0.453 0.736 0.405 0.542 0.205 0.274 0.612
Qwen1.5-32B-Chat | SP | 0.581 0.632 0.295 0.462 0.311 0.384 0.207 0.22 0.536
Qwen1.5-32B-Chat | CoT | 0.587 0.644 0.276 0.452 0.315 0.382 0.220 0.228 0.546
Qwen1.5-32B-Chat | SC | 0.583 0.628 0.276 0.442 0.312 0.386 0.203 0.222 0.540
Qwen1.5-32B-Chat | RAG | 0.446 0.554 0.269 0.436 0.309 0.420 0.183 0.248 0.664
Qwen1.5-32B-Chat | MAD | 0.630 0.704 0.321 0.566 0.363 0.482 0.256 0.286 0.520
Qwen1.5-32B-Chat | MADKE | 0.763 0.838 0.475 0.724 0.450 0.570 0.258 0.314 0.646
Qwen1.5-72B-Chat | SP | 0.665 0.706 0.378 0.550 0.332 0.428 0.226 0.26 0.596
Qwen1.5-72B-Chat | CoT | 0.715 0.776 0.406 0.648 0.431 0.514 0.275 0.324 0.625
Qwen1.5-72B-Chat | SC | 0.659 0.700 0.369 0.548 0.336 0.430 0.207 0.242 0.596
Qwen1.5-72B-Chat | RAG | 0.662 0.762 0.333 0.710 0.438 0.538 0.217 0.304 0.668
Qwen1.5-72B-Chat | MAD | 0.703 0.796 0.376 0.660 0.397 0.548 0.274 0.344 0.516
Qwen1.5-72B-Chat | MADKE | 0.787 0.874 0.479 0.748 0.495 0.622 0.284 0.350 0.686
"""
_MADKE_T4 = """
GPT-4-Turbo | SP | 0.861
GPT-3.5-Turbo | SP | 0.655
GPT-3.5-Turbo | CoT | 0.681
GPT-3.5-Turbo | SC | 0.655
GPT-3.5-Turbo | RAG | 0.545
GPT-3.5-Turbo | MAD | 0.622
GPT-3.5-Turbo | MADKE | 0.697
Qwen1.5-72B-Chat | SP | 0.659
Qwen1.5-72B-Chat | CoT | 0.640
Qwen1.5-72B-Chat | SC | 0.671
Qwen1.5-72B-Chat | RAG | 0.524
Qwen1.5-72B-Chat | MAD | 0.671
Qwen1.5-72B-Chat | MADKE | 0.709
"""
# Liang et al. Table 3 (CIAR accuracy, %).
_MAD_T3 = """
GPT-4 | SP | 51.0
GPT-3.5-Turbo | SP | 26.0
GPT-3.5-Turbo | CoT | 28.0
GPT-3.5-Turbo | SC | 29.5
GPT-3.5-Turbo | Self-Reflect | 27.5
GPT-3.5-Turbo | MAD | 37.0
"""
# Wu et al. Table 3 (instance accuracy before and after debate, by puzzle size, %). The table does not
# name its team; the paper's default anchor (A) is Het-Mix A.
_KKS_MODEL = "anchor team Het-Mix A (gpt-5-nano, qwen-turbo-latest, gemini-2.5-flash-lite)"
_KKS_T3 = f"""
{_KKS_MODEL} | initial proposals | 17.33 6.00 3.33
{_KKS_MODEL} | debate | 69.33 46.67 36.00
"""
# Kaesberg et al. Table 4 (accuracy, %, mean of 3 runs; Llama 3 8B).
_MALLM_T4 = """
Llama-3-8B-Instruct | Solution Counting | 53.6 33.0 28.6 55.3
Llama-3-8B-Instruct | Simple Voting | 53.3 32.0 30.5 58.5
Llama-3-8B-Instruct | Ranked Voting | 49.2 33.1 27.3 56.2
Llama-3-8B-Instruct | Cumulative Voting | 52.6 28.3 31.3 61.2
Llama-3-8B-Instruct | Majority Consensus | 53.2 36.4 32.3 59.9
Llama-3-8B-Instruct | Supermajority Consensus | 54.6 35.2 30.7 56.4
Llama-3-8B-Instruct | Unanimity Consensus | 54.2 36.3 30.0 58.8
"""
# Zhang et al. Table 1 (10 agents, 1 debate round; accuracy %).
_MADC_T1 = """
GPT-4o-mini | Single CoT | 70.0 63.2 69.8
GPT-4o-mini | SC | 82.4 66.4 76.2
GPT-4o-mini | MAD | 87.2 72.2 76.4
GPT-4o-mini | MAD+Truth | 90.4 76.0 76.4
GPT-4o-mini | MAD+MADC | 89.2 73.2 76.4
Qwen2.5-3B-Instruct | Single CoT | 42.0 27.2 61.4
Qwen2.5-3B-Instruct | SC | 54.0 28.8 69.2
Qwen2.5-3B-Instruct | MAD | 41.2 25.2 69.6
Qwen2.5-3B-Instruct | MAD+Truth | 64.0 48.0 76.2
Qwen2.5-3B-Instruct | MAD+MADC | 50.0 28.4 71.0
GLM-4-Flash | Single CoT | 46.0 41.2 43.2
GLM-4-Flash | SC | 60.8 50.0 54.6
GLM-4-Flash | MAD | 58.4 50.8 51.2
GLM-4-Flash | MAD+Truth | 72.8 62.4 53.2
GLM-4-Flash | MAD+MADC | 62.0 52.4 52.2
Qwen2.5-7B-Instruct | Single CoT | 52.4 57.0 67.8
Qwen2.5-7B-Instruct | SC | 60.2 64.0 75.8
Qwen2.5-7B-Instruct | MAD | 70.4 64.8 74.4
Qwen2.5-7B-Instruct | MAD+Truth | 81.8 76.0 80.4
Qwen2.5-7B-Instruct | MAD+MADC | 72.0 68.4 76.8
GLM-4-FlashX | Single CoT | 42.4 42.4 42.8
GLM-4-FlashX | SC | 57.2 50.8 53.8
GLM-4-FlashX | MAD | 60.4 49.2 53.4
GLM-4-FlashX | MAD+Truth | 70.0 62.0 55.2
GLM-4-FlashX | MAD+MADC | 61.6 51.2 55.0
qwen-turbo | Single CoT | 71.2 53.2 73.2
qwen-turbo | SC | 82.8 55.6 76.8
qwen-turbo | MAD | 82.4 58.4 78.2
qwen-turbo | MAD+Truth | 91.6 64.8 80.2
qwen-turbo | MAD+MADC | 83.2 60.4 78.2
DeepSeek-R1-Distill-Qwen-7B | Single CoT | 61.2 62.4 86.2
DeepSeek-R1-Distill-Qwen-7B | SC | 86.8 74.0 90.6
DeepSeek-R1-Distill-Qwen-7B | MAD | 76.0 65.2 87.2
DeepSeek-R1-Distill-Qwen-7B | MAD+Truth | 89.6 89.6 91.8
DeepSeek-R1-Distill-Qwen-7B | MAD+MADC | 85.2 74.8 90.2
qwen-plus | Single CoT | 84.8 52.4 77.0
qwen-plus | SC | 92.0 54.8 80.0
qwen-plus | MAD | 94.0 65.2 79.8
qwen-plus | MAD+Truth | 94.0 69.6 80.8
qwen-plus | MAD+MADC | 94.4 66.0 80.8
DeepSeek-R1-Distill-Qwen-14B | Single CoT | 92.4 75.2 87.2
DeepSeek-R1-Distill-Qwen-14B | SC | 99.2 79.2 90.8
DeepSeek-R1-Distill-Qwen-14B | MAD | 99.6 79.6 90.2
DeepSeek-R1-Distill-Qwen-14B | MAD+Truth | 99.6 81.6 92.2
DeepSeek-R1-Distill-Qwen-14B | MAD+MADC | 99.6 80.4 90.8
"""

FIGURES: tuple[PublishedFigure, ...] = tuple(
    _rows("madke", "MADKE Table 2", _MADKE_T2_COLUMNS, _MADKE_T2)
    + _rows("madke", "MADKE Table 4", (("mmlu-med", "accuracy"),), _MADKE_T4)
    + _rows("mad", "Liang et al. Table 3", (("ciar", "accuracy"),), _MAD_T3)
    + _rows(
        "kks",
        "Wu et al. Table 3",
        (("kks-4", "kks_strict"), ("kks-6", "kks_strict"), ("kks-8", "kks_strict")),
        _KKS_T3,
    )
    + _rows(
        "mallm",
        "Kaesberg et al. Table 4",
        (("mmlu", "accuracy"), ("mmlu-pro", "accuracy"), ("gpqa", "accuracy"), ("strategyqa", "accuracy")),
        _MALLM_T4,
    )
    + _rows(
        "madc",
        "Zhang et al. Table 1",
        (("logical-deduction", "accuracy"), ("geometric-shapes", "accuracy"), ("math500", "accuracy")),
        _MADC_T1,
    )
)

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

"""Summary statistics of timings and paired differences, in the forms the reports print."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the soak's checks use these statistics without loading the evaluation
    from evaluation.metrics import BootstrapCI


def percentile(xs: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0–100) as the sample nearest to rank ``p/100 · (n − 1)``; NaN when
    there is none."""
    s = sorted(xs)
    if not s:
        return float("nan")
    i = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[i]


def upper_percentile_ms(seconds: Sequence[float], p: int) -> float | None:
    """The sample at index ``⌊n · p / 100⌋`` of sorted ``seconds``, in ms rounded to 0.1 (None when
    empty): the soak's latency windows, which count the slow tail at or above the rank."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000, 1)


def interpolated_percentile(xs: Sequence[float], p: float) -> float:
    """numpy's linearly interpolated percentile, rounded to 0.01 (NaN when empty): the scale study's."""
    import numpy as np

    return round(float(np.percentile(xs, p)), 2) if xs else float("nan")


def ci_summary(ci: BootstrapCI) -> dict[str, Any]:
    """A paired bootstrap CI as the retrieval reports' JSON holds it."""
    return {
        "diff": round(ci.diff, 4),
        "low": round(ci.low, 4),
        "high": round(ci.high, 4),
        "excludes_0": ci.significant,
    }


def call_costs(calls: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The mean prompt and completion tokens and the p50/p95 seconds of model calls (each a dict with
    ``prompt_tokens``, ``completion_tokens`` and ``seconds``): what an LLM step costs per question."""
    return {
        "prompt_tokens": round(statistics.mean(x["prompt_tokens"] for x in calls), 1),
        "completion_tokens": round(statistics.mean(x["completion_tokens"] for x in calls), 1),
        "seconds_p50": round(percentile([x["seconds"] for x in calls], 50), 2),
        "seconds_p95": round(percentile([x["seconds"] for x in calls], 95), 2),
    }


def round_or_none(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)

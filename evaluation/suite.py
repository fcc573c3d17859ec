"""Named suites: one command that runs the protocols that matter on enough questions to tell them apart.

``parley eval --suite evidence --dataset data/nq_open_vital_dev.jsonl --out reports/evidence`` runs,
in one output folder and on the same knowledge pools,

- **tier 1** on the first 300 questions: RAG (the reference), closed-book single, MADKE and the
  same-budget self-consistency vote given each question's MADKE tokens (Choi et al.'s control);
- **tier 2** on the first 100 of them: CoT, self-consistency, MAD, society and MALLM (majority consensus).

Both tiers are ordinary ``parley eval`` runs, so an interrupted suite resumes where it stopped (run the
same command: finished items are skipped, failed ones retried; the pools are reused). Afterwards
``suite.md``/``suite.json`` give each run's accuracy with a 95 % CI, the paired differences against
RAG and against the same-budget vote with 95 % CIs, tokens and seconds per question, which setting
each run used, and ``plots/cost_accuracy.png`` (accuracy against tokens per question, one point per
protocol, CI error bars).

The figures of the papers are for much larger models than the embedded default: the suite's report
repeats where they found the effect (MADKE §5.3: knowledge helps from 32B parameters; no gain at
1.8–14B), so a small model's null result is read as what it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.config import KNOWLEDGE_FREE
from evaluation import metrics
from evaluation.harness import EvalOutcome, EvalRequest, PlanError
from evaluation.presets import MADKE
from evaluation.report import (
    answer_passages,
    compare_runs,
    discordant,
    parse_error_rates,
    questions_per_hour,
    run_setting,
    unparseable_share,
    unparseable_warnings,
)
from evaluation.runner import budget_label
from evaluation.store import ResultRecord, Workspace


@dataclass(frozen=True)
class Suite:
    """Two tiers of runs over the first questions of one dataset, and the reference runs of the
    comparisons."""

    name: str
    summary: str
    main: tuple[str, ...]  # tier 1; the first is the reference of the comparisons
    extra: tuple[str, ...]  # tier 2, on the first ``extra_limit`` questions
    main_limit: int
    extra_limit: int
    debate: str  # the debate whose tokens the same-budget vote is given
    extra_config: dict[str, Any] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        return self.main[0]


EVIDENCE = Suite(
    name="evidence",
    summary="RAG, single, MADKE and the same-budget vote on 300 questions; CoT, self-consistency, MAD, "
    "society and MALLM (majority) on 100",
    main=("rag", "single", "madke"),
    extra=("cot", "self_consistency", "mad", "society", "mallm"),
    main_limit=300,
    extra_limit=100,
    debate="madke",
    extra_config={"mallm": {"decision": "majority"}},
)

SUITES: dict[str, Suite] = {EVIDENCE.name: EVIDENCE}

# Where the literature found debate and knowledge gains, repeated in every suite report.
LITERATURE = (
    "MADKE (Wang et al.) reports its gains with GPT-3.5-Turbo and Qwen1.5-32B/72B-Chat; in its "
    "§5.3 (Qwen1.5-Chat at 1.8B, 7B, 14B, 32B, 72B) retrieved knowledge did not significantly improve "
    'the debate at 1.8–14B parameters and helped from 32B on. Choi et al. ("Debate or Vote") find '
    "that most of multi-agent debate's gain is majority voting, and Wunderlich et al. measure +1.3 "
    "points for debate over self-consistency at equal compute; the gains shrink below about 7B."
)
# MADKE Table 2, NQ (Natural Questions), F1: what the paper reports for comparison.
PAPER_NQ = (
    (
        "Qwen1.5-72B-Chat",
        {
            "single": 0.378,
            "cot": 0.406,
            "self_consistency": 0.369,
            "rag": 0.333,
            "society": 0.376,
            "madke": 0.479,
        },
    ),
    (
        "Qwen1.5-32B-Chat",
        {
            "single": 0.295,
            "cot": 0.276,
            "self_consistency": 0.276,
            "rag": 0.269,
            "society": 0.321,
            "madke": 0.475,
        },
    ),
    (
        "GPT-3.5-Turbo",
        {
            "single": 0.390,
            "cot": 0.418,
            "self_consistency": 0.431,
            "rag": 0.450,
            "society": 0.401,
            "madke": 0.453,
        },
    ),
)


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise PlanError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}") from None


def suite_requests(
    suite: Suite,
    base: EvalRequest,
    *,
    main_limit: int | None = None,
    extra_limit: int | None = None,
    paper_setting: bool = False,
) -> tuple[EvalRequest, EvalRequest]:
    """The two ``parley eval`` requests of a suite, into one output folder.

    ``paper_setting``: MADKE runs as the paper's preset (its agents, rounds, pool sizes, LLM judge and
    selection prompt, in the paper's wording) and every other run in the paper's wording too;
    otherwise every run uses the model's reliable style (``base.default_style``)."""
    if base.protocols and base.protocols != ["madke"]:
        raise PlanError("--suite chooses the protocols itself; drop --protocols")
    if base.preset is not None or base.prompt_styles:
        raise PlanError(
            "--suite runs one style per protocol; drop --preset / --prompt-styles (see --paper-setting)"
        )
    main_n = main_limit or suite.main_limit
    extra_n = extra_limit or suite.extra_limit
    if extra_n > main_n:
        raise PlanError(f"the second tier ({extra_n} questions) cannot be larger than the first ({main_n})")
    if paper_setting:
        # The preset's run is labelled madke; the other tier-1 protocols run beside it as its baselines,
        # with the paper's wording (the preset's shared settings).
        main = replace(
            base,
            protocols=[p for p in suite.main if p != suite.debate],
            preset=MADKE.name,
            limit=main_n,
            same_budget=True,
        )
        extra_base = {**suite.extra_config, **base.base_config, "prompt_style": "paper"}
    else:
        main = replace(base, protocols=list(suite.main), limit=main_n, same_budget=True)
        extra_base = {**suite.extra_config, **base.base_config}
    # The second tier adds runs to the first one's folder: it must never start it afresh.
    extra = replace(
        base,
        protocols=list(suite.extra),
        limit=extra_n,
        base_config=extra_base,
        same_budget=False,
        fresh=False,
    )
    return main, extra


Evaluate = Callable[..., Awaitable[EvalOutcome]]


async def run_suite(
    suite: Suite,
    main: EvalRequest,
    extra: EvalRequest,
    evaluate: Evaluate,
    *,
    plots: bool = True,
    **deps: Any,
) -> dict[str, Any]:
    """Run (or resume) both tiers with the same dependencies (``models``, ``pool_builder``, ``judge``)
    and write the suite report; returns it."""
    first = await evaluate(main, **deps)
    second = await evaluate(extra, **deps)
    return write_suite_report(
        Workspace(main.out),
        suite,
        labels=[*first.labels, *second.labels],
        samples=main.bootstrap_samples,
        seed=main.bootstrap_seed,
        plots=plots,
    )


# ----------------------------------------------------------------------------------------- report
def accuracy_ci(values: Sequence[float], *, samples: int, seed: int) -> tuple[float | None, float, float]:
    """Mean and percentile-bootstrap 95 % CI of per-question scores (the harness's bootstrap, against
    zeros, so the interval is computed exactly as the paired differences are)."""
    if not values:
        return None, 0.0, 0.0
    ci = metrics.paired_bootstrap([0.0] * len(values), values, samples=samples, seed=seed)
    return ci.diff, ci.low, ci.high


def cost_per_question(ok: Sequence[ResultRecord]) -> dict[str, float | None]:
    """Tokens, seconds and calls per finished question (None where none finished)."""
    if not ok:
        return {"tokens_per_q": None, "seconds_per_q": None, "calls_per_q": None}
    return {
        "tokens_per_q": metrics.mean(r.prompt_tokens + r.completion_tokens for r in ok),
        "seconds_per_q": metrics.mean(r.seconds for r in ok),
        "calls_per_q": metrics.mean(r.calls for r in ok),
    }


def by_pool_answer(
    ws: Workspace,
    results: dict[str, dict[str, ResultRecord]],
    *,
    pairs: Sequence[tuple[str, str]] = (),
    samples: int,
    seed: int,
) -> dict[str, Any] | None:
    """Each run's accuracy on the questions whose knowledge pool holds a gold answer string (the
    passages RAG and MADKE read; a normalised alias on word boundaries, as ``contains`` scores) and on
    the others. Runs that read no pool show how hard the two groups are on their own, so a knowledge
    protocol's gain on the first group is read against theirs; ``pairs`` are compared (paired
    bootstrap) within each group. None where no pools were built."""
    pools = ws.load_pools()
    if not pools:
        return None
    gold = {it.id: it.answers for it in ws.load_items()}
    holds = {item_id: bool(answer_passages(pool, gold.get(item_id, []))) for item_id, pool in pools.items()}
    runs = []
    for label, recs in results.items():
        row: dict[str, Any] = {"label": label}
        for group, wanted in (("holds", True), ("lacks", False)):
            values = [r.scores.correct for r in _ok(recs) if r.scores and holds.get(r.id) is wanted]
            acc, low, high = accuracy_ci(values, samples=samples, seed=seed)
            row[group] = {"n": len(values), "accuracy": acc, "ci_low": low, "ci_high": high}
        runs.append(row)
    order = [it_id for it_id in gold if it_id in holds]
    comparisons = [
        {
            **compare_runs(
                a, b, results, [i for i in order if holds[i] is wanted], samples=samples, seed=seed
            ),
            "group": group,
        }
        for a, b in pairs
        if a in results and b in results
        for group, wanted in (("holds", True), ("lacks", False))
    ]
    return {"questions": len(holds), "holding": sum(holds.values()), "runs": runs, "comparisons": comparisons}


def _ok(results: dict[str, ResultRecord]) -> list[ResultRecord]:
    return [r for r in results.values() if r.status == "ok" and r.scores is not None]


def write_suite_report(
    ws: Workspace,
    suite: Suite,
    *,
    labels: Sequence[str],
    samples: int = 10_000,
    seed: int = 0,
    plots: bool = True,
) -> dict[str, Any]:
    """``suite.json``, ``suite.md`` and ``plots/cost_accuracy.png`` from the results in ``ws``."""
    manifest = ws.load_manifest()
    if manifest is None:
        raise PlanError(f"{ws.root} holds no evaluation")
    order = [it.id for it in ws.load_items()]
    results = {label: ws.load_results(label) for label in labels}
    vote = budget_label(suite.debate)
    runs = []
    for label in labels:
        spec = next(s for s in manifest.runs if s.label == label)
        ok = _ok(results[label])
        acc, low, high = accuracy_ci([r.scores.correct for r in ok if r.scores], samples=samples, seed=seed)
        transcripts = ws.load_transcripts(label)
        rates = parse_error_rates(transcripts.values())
        uses_pool = spec.protocol not in KNOWLEDGE_FREE and spec.config.get("knowledge") != "none"
        pools = [len(t.pool.items) for t in transcripts.values()] if uses_pool else []
        runs.append(
            {
                "label": label,
                "protocol": spec.protocol,
                "prompt_style": spec.prompt_style,
                "setting": run_setting(spec),
                "n": len(ok),
                "failed": sum(1 for r in results[label].values() if r.status == "failed"),
                "accuracy": acc,
                "ci_low": low,
                "ci_high": high,
                **cost_per_question(ok),
                "questions_per_hour": questions_per_hour(ws.load_invocations(label)),
                "unparseable": unparseable_share(rates),
                "parse_errors": rates,
                "pool_items": metrics.mean(pools) if pools else None,
                "models": sorted(
                    {rec.model for t in transcripts.values() for rec in t.transcript if rec.model}
                ),
            }
        )
    pairs = [
        (ref, label) for ref in (suite.reference, vote) if ref in results for label in labels if label != ref
    ]
    if "single" in results and suite.debate in results:
        pairs.append(("single", suite.debate))
    comparisons = [compare_runs(a, b, results, order, samples=samples, seed=seed) for a, b in pairs]
    report: dict[str, Any] = {
        "suite": suite.name,
        "summary": suite.summary,
        "dataset": manifest.dataset,
        "primary": manifest.primary,
        "reference": suite.reference,
        "vote": vote,
        "debate": suite.debate,
        "bootstrap": {"samples": samples, "seed": seed, "level": 0.95},
        "runs": runs,
        "comparisons": comparisons,
        "pool_answer": by_pool_answer(
            ws,
            results,
            # what reading adds (RAG over closed book) and what the debate does with it
            pairs=[("single", suite.reference), (suite.reference, suite.debate), ("single", suite.debate)],
            samples=samples,
            seed=seed,
        ),
        "literature": LITERATURE,
        "paper_nq_f1": [{"model": m, **v} for m, v in PAPER_NQ],
    }
    report["warnings"] = unparseable_warnings({"runs": runs})
    report["verdict"] = verdict(report)
    if plots and any(r["accuracy"] is not None for r in runs):
        report["plot"] = str(
            cost_accuracy_plot(report, ws.root / "plots" / "cost_accuracy.png").relative_to(ws.root)
        )
    (ws.root / "suite.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (ws.root / "suite.md").write_text(render_suite(report), encoding="utf-8")
    return report


def _diff(report: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    return next((c for c in report["comparisons"] if c["a"] == a and c["b"] == b and c["n"]), None)


def verdict(report: dict[str, Any]) -> list[str]:
    """Whether the debate beats RAG, closed-book single and the same-budget vote, said plainly."""
    debate = report["debate"]
    lines = []
    for ref, name in (
        (report["reference"], "RAG"),
        ("single", "closed-book single"),
        (report["vote"], "the same-budget vote"),
    ):
        c = _diff(report, ref, debate)
        if c is None:
            continue
        d, lo, hi, n = c["diff"], c["ci_low"], c["ci_high"], c["n"]
        if lo > 0:
            words = "beats"
        elif hi < 0:
            words = "is worse than"
        else:
            words = "is not distinguishable from"
        lines.append(
            f"{debate} {words} {name}: {100 * d:+.1f} points, 95 % CI [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"over {n} questions"
        )
    beats = [c for ref in (report["reference"], "single") if (c := _diff(report, ref, debate)) is not None]
    if len(beats) == 2 and not all(c["ci_low"] > 0 for c in beats):
        lines.append(
            f"At this model and on these questions {debate} does not beat both RAG and closed-book single "
            "with a 95 % CI that excludes 0; the papers found the effect only with much larger models "
            "(see below)."
        )
    return lines


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
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from evaluation.plots import _pyplot

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
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _num(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _ci(row: dict[str, Any]) -> str:
    """``[16.0, 27.0]``, or a dash where nothing finished (no accuracy, so no interval)."""
    return "–" if row["accuracy"] is None else f"[{_pct(row['ci_low'])}, {_pct(row['ci_high'])}]"


def render_pool_answer(split: dict[str, Any] | None) -> list[str]:
    if not split or not split["questions"]:
        return []
    lines = [
        "",
        "## Accuracy when the pool holds the answer",
        "",
        f"The question's knowledge pool (the passages RAG and MADKE read) holds a gold answer string for "
        f"{split['holding']} of its {split['questions']} questions "
        f"({100 * split['holding'] / split['questions']:.1f} %). Each run's accuracy on those and on the "
        "others: a run that reads no pool shows how hard each group is without it, so what reading adds "
        "is the knowledge run's gain over it on the first group. On the second, every run answers from "
        "what the model already knows.",
        "",
        "| run | n (pool holds) | accuracy % | 95 % CI | n (pool lacks) | accuracy % | 95 % CI |",
        "|---|---|---|---|---|---|---|",
    ]

    def cells(g: dict[str, Any]) -> str:
        return f"{g['n']} | {_pct(g['accuracy'])} | {_ci(g)}"

    lines += [f"| {r['label']} | {cells(r['holds'])} | {cells(r['lacks'])} |" for r in split["runs"]]
    compared = [c for c in split.get("comparisons", []) if c["n"]]
    if compared:
        lines += [
            "",
            "Paired differences within each group (B − A over the questions both finished; groups chosen "
            "after the fact, so read them as a diagnosis of where the difference comes from):",
            "",
            "| pool | A | B | n | A % | B % | B better / A better | B − A (points) | 95 % CI | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [f"| {c['group']} {paired_row(c)}" for c in compared]
    return lines


def paired_row(c: dict[str, Any]) -> str:
    """``| A | B | n | A % | B % | B better / A better | B − A | 95 % CI | verdict |`` of one comparison."""
    if not c["n"]:
        return f"| {c['a']} | {c['b']} | 0 | – | – | – | – | – | no question finished in both |"
    verdict_word = "real difference" if c["significant"] else "may be noise"
    return (
        f"| {c['a']} | {c['b']} | {c['n']} | {_pct(c['accuracy_a'])} | {_pct(c['accuracy_b'])} "
        f"| {discordant(c)} | {100 * c['diff']:+.1f} "
        f"| [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] | {verdict_word} |"
    )


def render_suite(report: dict[str, Any]) -> str:
    """The suite's Markdown report."""
    models = sorted({m for r in report["runs"] for m in r["models"]})
    lines = [
        f"# Suite `{report['suite']}`",
        "",
        f"{report['summary']}. Dataset `{report['dataset']}`; accuracy = **{report['primary']}**; "
        f"model: {', '.join(models) or '–'}. 95 % CIs by percentile bootstrap over questions "
        f"({report['bootstrap']['samples']} resamples, seed {report['bootstrap']['seed']}).",
        "",
    ]
    if report["verdict"]:
        lines += ["## Verdict", "", *[f"- {v}" for v in report["verdict"]], ""]
    if report["warnings"]:
        lines += ["**Warning: unparseable replies**", "", *[f"- {w}" for w in report["warnings"]], ""]
    lines += [
        "## Runs",
        "",
        "| run | n | failed | accuracy % | 95 % CI | tokens/q | s/q | q/h | calls/q | unparseable % "
        "| pool items | setting |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['label']} | {r['n']} | {r['failed']} | {_pct(r['accuracy'])} "
            f"| {_ci(r)} "
            f"| {_num(r['tokens_per_q'], 0)} | {_num(r['seconds_per_q'], 1)} "
            f"| {_num(r.get('questions_per_hour'), 0)} | {_num(r['calls_per_q'], 1)} "
            f"| {_pct(r['unparseable'])} | {_num(r['pool_items'], 1)} "
            f"| {r['setting']} |"
        )
    lines += [
        "",
        f"## Paired differences against {report['reference']} and against {report['vote']}",
        "",
        "B − A over the questions both finished; *B better / A better* counts the questions on which one"
        " run answered better than the other (the rest tie): the difference comes from those alone. A CI"
        " that contains 0 means the difference may be noise.",
        "",
        "| A | B | n | A % | B % | B better / A better | B − A (points) | 95 % CI | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [paired_row(c) for c in report["comparisons"]]
    lines += render_pool_answer(report.get("pool_answer"))
    if report.get("plot"):
        lines += ["", f"![cost and accuracy]({report['plot']})"]
    lines += [
        "",
        "## What the papers report",
        "",
        report["literature"],
        "",
        "MADKE Table 2, NQ, F1 (their models; Parley's figure above is its own metric on its own model):",
        "",
        "| paper model | single | CoT | self-consistency | RAG | MAD (society) | MADKE |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["paper_nq_f1"]:
        lines.append(
            f"| {row['model']} | {_pct(row['single'])} | {_pct(row['cot'])} "
            f"| {_pct(row['self_consistency'])} | {_pct(row['rag'])} | {_pct(row['society'])} "
            f"| {_pct(row['madke'])} |"
        )
    return "\n".join(lines) + "\n"

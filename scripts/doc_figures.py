"""The measured figures the README and the docs quote, written from the reports they come from.

    .venv/bin/python scripts/doc_figures.py            # rewrite every marked block
    .venv/bin/python scripts/doc_figures.py --check    # exit 1 when a block differs from its report

A block sits between ``<!-- figures: NAME (…) -->`` and ``<!-- /figures -->`` in a Markdown file; its
text is what ``BLOCKS[NAME]`` renders from the report it names, so a rescored or rerun report changes
the docs by running this script, and tests/docs/test_figures.py fails while they disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = "reports/evidence"
MODELS_JSON = "services/llm/models.json"
LABELS = {
    "madke": "MADKE",
    "rag": "RAG",
    "single": "closed-book single",
    "vote-budget-madke": "self-consistency vote given MADKE's tokens",
    "cot": "chain of thought",
    "self_consistency": "self-consistency (5 samples)",
    "mad": "MAD (Liang et al.)",
    "society": "society (Du et al.)",
    "mallm": "MALLM, majority consensus",
}
METRIC_NAMES = {"strict_contains": "strict contains", "contains": "contains", "em": "exact match"}


def _json(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / path).read_text(encoding="utf-8"))
    return loaded


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def points(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "−")


def interval(low: float, high: float, signed: bool = False) -> str:
    if signed:
        return f"[{points(low)}, {points(high)}]"
    return f"[{pct(low)}, {pct(high)}]"


def _comparison(suite: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    for c in suite["comparisons"]:
        if (c["a"], c["b"]) == (a, b):
            return dict(c)
    return None


def _diff_cell(c: dict[str, Any] | None) -> str:
    if c is None:
        return "–"
    noise = "" if c["ci_low"] > 0 or c["ci_high"] < 0 else " (may be noise)"
    return f"{points(c['diff'])} {interval(c['ci_low'], c['ci_high'], signed=True)}{noise}"


def evidence_headline() -> str:
    """README: the four tier-1 runs in one sentence, and whether any two can be told apart."""
    suite = _json(f"{EVIDENCE}/suite.json")
    runs = {r["label"]: r for r in suite["runs"]}
    tier1 = ["madke", "rag", "single", "vote-budget-madke"]
    n = runs["madke"]["n"]
    c = _comparison(suite, "rag", "madke")
    assert c is not None
    separated = [
        (x["a"], x["b"])
        for x in suite["comparisons"]
        if x["a"] in tier1 and x["b"] in tier1 and (x["ci_low"] > 0 or x["ci_high"] < 0)
    ]
    beaten = [
        LABELS[a]
        for a in ("rag", "vote-budget-madke")
        if (x := _comparison(suite, a, "madke")) is not None and x["ci_low"] > 0
    ]
    verdict = f"MADKE beats {' and '.join(beaten)}" if beaten else "MADKE beats neither RAG nor the vote"
    if separated:
        told = "; ".join(
            f"{LABELS[b]} − {LABELS[a]} {_diff_cell(_comparison(suite, a, b))} points" for a, b in separated
        )
        verdict += f"; among the four only this difference excludes 0: {told}"
    else:
        verdict += "; the four cannot be told apart"
    return textwrap.fill(
        f"Small models stay weak on open questions. On the first {n} dev questions with the 1.5B (`parley "
        f"eval --suite evidence`, scored by the {METRIC_NAMES.get(suite['primary'], suite['primary'])}), "
        f"MADKE answered {pct(runs['madke']['accuracy'])} %, RAG {pct(runs['rag']['accuracy'])} %, "
        f"closed-book single {pct(runs['single']['accuracy'])} % and a self-consistency vote given MADKE's "
        f"tokens {pct(runs['vote-budget-madke']['accuracy'])} % (MADKE − RAG {points(c['diff'])} points, "
        f"95 % CI {interval(c['ci_low'], c['ci_high'], signed=True)}). {verdict[0].upper()}{verdict[1:]}.",
        width=105,
        break_on_hyphens=False,
    )


def evidence_table() -> str:
    """docs/evaluation.md: every run of the suite with its CI, cost and paired differences."""
    suite = _json(f"{EVIDENCE}/suite.json")
    metric = METRIC_NAMES.get(suite["primary"], suite["primary"])
    lines = [
        f"Accuracy = {metric}; 95 % CIs by bootstrap over questions, paired for the differences "
        f"(`{EVIDENCE}/suite.json`).",
        "",
        "| run | n | accuracy % [95 % CI] | tokens/q | calls/q | questions/h | − RAG, points "
        "| − vote, points |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in suite["runs"]:
        label = r["label"]
        vs_rag = _comparison(suite, "rag", label) if label != "rag" else None
        vs_vote = _comparison(suite, "vote-budget-madke", label) if label != "vote-budget-madke" else None
        lines.append(
            f"| {LABELS.get(label, label)} | {r['n']} | {pct(r['accuracy'])} "
            f"{interval(r['ci_low'], r['ci_high'])} | {r['tokens_per_q']:,.0f} | {r['calls_per_q']:.1f} | "
            f"{r['questions_per_hour']:.0f} | {_diff_cell(vs_rag)} | {_diff_cell(vs_vote)} |"
        )
    pool = suite["pool_answer"]
    by = {r["label"]: r for r in pool["runs"]}
    holds = ", ".join(
        f"{LABELS[x]} {pct(by[x]['holds']['accuracy'])} %" for x in ("madke", "rag", "single") if x in by
    )
    lacks = ", ".join(
        f"{LABELS[x]} {pct(by[x]['lacks']['accuracy'])} %" for x in ("madke", "rag", "single") if x in by
    )
    lines += [
        "",
        textwrap.fill(
            f"The first pool holds a gold answer for {pool['holding']} of the {pool['questions']} questions; "
            f"there {holds}; where it does not, {lacks}.",
            width=105,
            break_on_hyphens=False,
        ),
    ]
    return "\n".join(lines)


def models_measured() -> str:
    """docs/engine-and-protocols.md: what each packaged model measured, as `parley models` shows it."""
    registry = _json(MODELS_JSON)
    lines = [
        "| model | run | accuracy % [95 % CI] | metric | questions | s per debate | report |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, model in registry["models"].items():
        for m in model.get("measured", []):
            low, high = m["accuracy_ci"]
            lines.append(
                f"| `{name}` | {m['run']} | {pct(m['accuracy'])} {interval(low, high)} | {m['metric']} | "
                f"{m['questions']} | {m['seconds_per_debate']:.1f} | `{m['report']}` |"
            )
    return "\n".join(lines)


def _parse_errors(run: dict[str, Any]) -> str:
    return ", ".join(f"{role} {pe['errors']}/{pe['records']}" for role, pe in run["parse_errors"].items())


def _rounds(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def styles_table() -> str:
    """docs/benchmarks-and-reports.md: prompt styles × models, from the two models' reports."""
    folders = {"1.5B": "reports/styles-1.5b", "0.5B": "reports/styles-0.5b"}
    order = ["madke-robust", "madke-paper", "single-robust", "single-paper", "rag-robust", "rag-paper"]
    metrics = {model: _json(f"{folder}/metrics.json") for model, folder in folders.items()}
    primary = " / ".join(
        dict.fromkeys(METRIC_NAMES.get(m["primary"], m["primary"]) for m in metrics.values())
    )
    lines = [
        f"Accuracy = {primary} (`reports/styles-*/metrics.json`).",
        "",
        "| model | run | n | accuracy % | contains % | EM % | F1 % | valid selections % "
        "| parse errors per role | rounds | calls/q | s/q |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, m in metrics.items():
        runs = {r["label"]: r for r in m["runs"]}
        for label in [x for x in order if x in runs]:
            r = runs[label]
            share = (r.get("selection") or {}).get("valid_selection_share")
            lines.append(
                f"| {model} | {label} | {r['ok']} | {pct(r['accuracy'])} | {pct(r['contains'])} | "
                f"{pct(r['em'])} | {pct(r['f1'])} | {'–' if share is None else f'{100 * share:.1f}'} | "
                f"{_parse_errors(r)} | {_rounds(r['avg_rounds'])} | {r['calls_per_q']:.1f} | "
                f"{r['seconds_per_q']:.1f} |"
            )
    lines.append("")
    diffs = []
    for model, m in metrics.items():
        for c in m["comparisons"]:
            if c["a"] == "madke-robust":
                diffs.append(f"{model} {c['b']} − madke-robust {_diff_cell(c)}")
    lines.append(textwrap.fill("Paired (bootstrap 95 % CI, points): " + "; ".join(diffs) + ".", width=105))
    return "\n".join(lines)


def nq100_table() -> str:
    """docs/benchmarks-and-reports.md: four protocols on 100 questions with the 0.5B."""
    m = _json("reports/nq100-0.5b/metrics.json")
    lines = [
        f"Accuracy = {METRIC_NAMES.get(m['primary'], m['primary'])} (`reports/nq100-0.5b/metrics.json`).",
        "",
        "| run | accuracy % | contains % | EM % | F1 % | Co2 % | Cons % | rounds | calls/q | tokens/q "
        "| s/q |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in m["runs"]:
        lines.append(
            f"| {r['label']} | {pct(r['accuracy'])} | {pct(r['contains'])} | {pct(r['em'])} | "
            f"{pct(r['f1'])} | {pct(r['co2'])} | {100 * r['cons']:.0f} | {_rounds(r['avg_rounds'])} | "
            f"{r['calls_per_q']:.1f} | {r['tokens_per_q']:,.0f} | {r['seconds_per_q']:.1f} |"
        )
    return "\n".join(lines)


def pool_size_table(folder: str) -> Callable[[], str]:
    """docs/retrieval.md: accuracy and what the pool held against the pool size, from one study."""

    def render() -> str:
        study = _json(f"{folder}/pool_size.json")
        diffs = {(c["protocol"], c["b"]): c for c in study["comparisons"]}
        lines = [
            f"Accuracy = {METRIC_NAMES.get(study['primary'], study['primary'])} (`{folder}/pool_size.json`).",
            "",
            "| pool size | questions | accuracy | 95 % CI | vs 5 (paired, 95 % CI) | tokens / question "
            "| pool held an answer | accuracy where it did |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in study["rows"]:
            c = diffs.get((r["protocol"], f"k{r['size']}"))
            vs = (
                "—"
                if c is None
                else f"{c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] ({c['n']} q)"
            )
            lines.append(
                f"| {r['size']} | {r['n']} | {r['accuracy']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                f"{vs.replace('-', '−')} | {r['tokens_per_q']:,.0f} | {r['answer_in_pool']:.3f} | "
                f"{r['accuracy_when_held']:.3f} |"
            )
        return "\n".join(lines)

    return render


def rag_passage() -> str:
    """docs/retrieval.md: RAG with the written passage's pools against the question's, end to end."""
    vs_question = _json("reports/rag-passage/paired-vs-question.json")
    vs_single = _json("reports/rag-passage/paired-vs-single.json")
    primary = _json("reports/rag-passage/eval.json")["primary"]
    q, s = vs_question["metrics"][primary], vs_single["metrics"][primary]

    def diff(m: dict[str, Any]) -> str:
        noise = ": may be noise" if m["low"] <= 0 <= m["high"] else ""
        return f"{m['diff']:+.3f}, paired 95 % CI [{m['low']:+.3f}, {m['high']:+.3f}]{noise}".replace(
            "-", "−"
        )

    return textwrap.fill(
        f"On {vs_question['questions']} questions RAG answered {q['b']:.3f} with the passage's pools against "
        f"{q['a']:.3f} with the question's ({METRIC_NAMES.get(primary, primary)}, {diff(q)}); closed-book "
        f"single answered {s['a']:.3f}, and single → RAG with the passage's pools is {diff(s)} "
        "(`paired-vs-question.md`, `paired-vs-single.md` in `reports/rag-passage/`).",
        width=105,
        break_on_hyphens=False,
    )


def _relative(path: str) -> str:
    """A path a report recorded, relative to the repository when it lies inside it."""
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_absolute() and p.is_relative_to(ROOT) else path


def pool_search_replay() -> str:
    """docs/engine-and-protocols.md: the search step replayed on the recorded evidence debates."""
    r = _json("reports/pool-search/replay/bench.json")
    d = r["final_minus_first"]
    past = r["past_round_1"]
    noise = " (may be noise)" if d["low"] <= 0 <= d["high"] else ""
    return textwrap.fill(
        f"Replayed on the {r['questions']} recorded MADKE debates of `{_relative(r['evaluation'])}` "
        f"(`reports/pool-search/replay/`, `python -m bench.pool_search`): {r['debates_past_round_1']} went "
        f"past round 1 and searched; answer in pool {pct(r['answer_in_first_pool'])} % for the first pool "
        f"and {pct(r['answer_in_final_pool'])} % for the final one, {points(d['diff'])} points "
        f"{interval(d['low'], d['high'], signed=True)}{noise}; over the debates that searched "
        f"{pct(past['answer_in_first_pool'])} % → {pct(past['answer_in_final_pool'])} %. "
        f"{r['searches_written_per_debate']} searches written per debate that searched, "
        f"{r['items_added_per_question']} items added per question "
        f"({r['added_items_holding_an_answer']} of them holding an answer), "
        f"{r['search_tokens_per_debate']:.0f} tokens and {r['search_seconds_per_debate']:.1f} s of "
        "searching per debate that searched.",
        width=105,
        break_on_hyphens=False,
    )


def pool_search_e2e() -> str:
    """docs/engine-and-protocols.md: MADKE with searches during the debate against the evidence suite's
    MADKE on the same questions, and what the decision rule makes of it."""
    paired = _json("reports/pool-search/e2e/paired-vs-evidence.json")
    run = next(r for r in _json("reports/pool-search/e2e/metrics.json")["runs"] if r["label"] == "madke")
    m, cost, g = paired["metrics"]["strict_contains"], paired["cost"], run["pool_growth"]
    d = g["final_minus_first"]
    holds_zero = m["low"] <= 0 <= m["high"]
    verdict = (
        "the interval holds 0 (may be noise), so by the rule the default stays no searches"
        if holds_zero
        else "the interval excludes 0"
    )
    return textwrap.fill(
        f"End to end on the suite's questions (`reports/pool-search/e2e/`, `parley eval --config "
        "reports/pool-search/madke-search.json`), paired with the suite's MADKE on the "
        f"{paired['questions']} both answered: strict contains {pct(m['a'])} % without searches and "
        f"{pct(m['b'])} % with them, "
        f"{points(m['diff'])} points {interval(m['low'], m['high'], signed=True)}: {verdict}. "
        f"{cost['tokens']['ratio']:.2f}× the tokens per question ({cost['tokens']['a']:,.0f} → "
        f"{cost['tokens']['b']:,.0f}) and {cost['seconds']['ratio']:.2f}× the seconds per debate "
        f"({cost['seconds']['a']:.0f} → {cost['seconds']['b']:.0f} s, runs made at different times on a "
        f"shared machine). Answer in pool {pct(g['answer_in_first_pool'])} % for the first pool and "
        f"{pct(g['answer_in_final_pool'])} % for the final one, {points(d['diff'])} points "
        f"{interval(d['low'], d['high'], signed=True)}; {g['searches_per_q']:.2f} searches and "
        f"{g['items_added_per_q']:.2f} items added per question, {pct(g['added_items_selected'])} % of the "
        f"added items selected, {g['selections_of_added_by_other_agents']} selections of an item by the "
        f"agent that did not find it; {g['debates_with_retriever_outage']} debates met a retriever outage.",
        width=105,
        break_on_hyphens=False,
    )


HELD_OUT = "reports/pool-search/held-out"


def _held_out_size() -> int:
    """How many questions the held-out study's dataset slice holds: the items the harness wrote for it."""
    items = ROOT / HELD_OUT / "debate_search.per_agent=1" / "items.jsonl"
    return sum(1 for line in items.open(encoding="utf-8") if line.strip())


def pool_search_held_out() -> str:
    """docs/engine-and-protocols.md: MADKE with and without searches on the held-out questions, and the
    part of the decision rule that reads them."""
    paired = _json(f"{HELD_OUT}/paired.json")
    run = _json(f"{HELD_OUT}/debate_search.per_agent=1/metrics.json")["runs"][0]
    m, cost, g = paired["metrics"]["strict_contains"], paired["cost"], run["pool_growth"]
    d, total = g["final_minus_first"], _held_out_size()
    scope = (
        f"all {total} held-out questions"
        if paired["questions"] == total
        else f"the first {paired['questions']} of the {total} held-out questions (the study resumes where it "
        "stopped: same command)"
    )
    noise = "" if m["low"] > 0 or m["high"] < 0 else " (may be noise)"
    sign = "negative" if m["diff"] < 0 else "not negative"
    main = _json("reports/pool-search/e2e/paired-vs-evidence.json")["metrics"]["strict_contains"]
    if main["low"] <= 0:
        verdict = (
            f"the point estimate is {sign}; the default stays no searches whichever way it goes, since the "
            "main questions' interval holds 0"
        )
    else:
        verdict = f"the point estimate is {sign}, the rule's last condition"
    return textwrap.fill(
        f"On the held-out questions, which chose nothing (`{HELD_OUT}/`, `parley eval --experiment "
        f"experiments/pool-search-held-out.toml`, both cells ten questions at a time), over {scope}: strict "
        f"contains {pct(m['a'])} % without searches and {pct(m['b'])} % with them, "
        f"{points(m['diff'])} points {interval(m['low'], m['high'], signed=True)}{noise}: {verdict}. "
        f"{cost['tokens']['ratio']:.2f}× the tokens per question ({cost['tokens']['a']:,.0f} → "
        f"{cost['tokens']['b']:,.0f}). Answer in pool {pct(g['answer_in_first_pool'])} % for the first pool "
        f"and {pct(g['answer_in_final_pool'])} % for the final one, {points(d['diff'])} points "
        f"{interval(d['low'], d['high'], signed=True)} over the searching cell's {g['debates']} debates; "
        f"{g['searches_per_q']:.2f} searches and {g['items_added_per_q']:.2f} items added per question.",
        width=105,
        break_on_hyphens=False,
    )


def call_cache_replay() -> str:
    """docs/evaluation.md: a 300-question run replayed from its call cache."""
    r = _json("reports/call-cache/replay-e2e/bench.json")
    scope = f"its questions {r['skipped'] + 1} on, " if r["skipped"] else ""
    return textwrap.fill(
        f"Measured (`reports/call-cache/replay-e2e/`): the {r['label']} run of `{r['source']}`, {scope}"
        f"{r['questions']} questions, replayed in {r['seconds']:.1f} s; "
        f"{r['model_calls_reaching_the_server']} model calls reached the server, "
        f"{r['replayed_calls']:,} of {r['calls']:,} calls came from the cache, {r['identical_results']} "
        f"questions had the same answer, scores and rounds and {r['identical_transcripts']} the same "
        f"transcript replies. The cache held {r['cache']['entries']:,} entries in {r['cache']['mb']} MB "
        f"({r['cache']['bytes_per_entry']} bytes per reply); the {r['estimate']['calls']:,} calls of "
        f"`{r['estimate']['folder']}` would take {r['estimate']['mb']} MB.",
        width=105,
        break_on_hyphens=False,
    )


def multihost_table() -> str:
    """docs/deployment.md: each partition and slow link of the multi-host harness, its jobs' outcomes and
    how long the service took to recover once the link healed."""
    report = _json("reports/multihost/multihost.json")
    rows: dict[str, list[dict[str, Any]]] = {}
    for f in report["faults"]:
        rows.setdefault(f["kind"], []).append(f)
    lines = [
        f"`{report['command']}` (`reports/multihost/multihost.json`):",
        "",
        "| fault | cut s | runs | jobs | lost | run twice | failed | recovery after the heal, s (each run) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, runs in rows.items():
        total = {k: sum(f["jobs"][k] for f in runs) for k in ("submitted", "lost", "run_twice", "failed")}
        recovery = ", ".join(
            "not recovered" if f["recovery_s"] is None else f"{f['recovery_s']:.1f}" for f in runs
        )
        lines.append(
            f"| {kind} | {runs[0]['cut_s']:g} | {len(runs)} | {total['submitted']} | {total['lost']} | "
            f"{total['run_twice']} | {total['failed']} | {recovery} |"
        )
    t = report["totals"]
    reasons: dict[str, int] = {}
    for f in report["faults"]:
        for reason, n in f["jobs"]["failed_reasons"].items():
            reasons[f"{f['kind']}: {reason}"] = reasons.get(f"{f['kind']}: {reason}", 0) + n
    failed = "; ".join(f"{reason} ({n})" for reason, n in reasons.items()) or "none"
    lines += [
        "",
        f"Failed, by reason: {failed}. Idempotency-Keys that named two jobs: {t['keys_naming_two_jobs']}; "
        f"jobs charged other than what was served for them: {report['jobs_charged_not_served']} (jobs whose "
        "call in flight a partition cut keep that call's worst case, by design: "
        f"{report['jobs_cut_by_a_killed_worker_charged_worst_case']}).",
    ]
    return "\n".join(lines)


def redis_failover_table() -> str:
    """docs/deployment.md: what a Sentinel failover lost at the defaults and at the safe setting."""
    report = _json("reports/redis-failover/bench.json")
    lines = [
        f"`{report['command']}` (`reports/redis-failover/bench.json`), {len(report['trials']) // 2} trials "
        "per setting:",
        "",
        "| setting | jobs accepted (202) | accepted, then lost | unfinished | completed twice | items whose "
        "LLM calls were repeated | acknowledged writes | acknowledged, then lost | failover, s (max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, t in report["totals"].items():
        repeated = sum(
            r["items_with_repeated_llm_calls"] for r in report["trials"] if r["setting"] == setting
        )
        lines.append(
            f"| {setting} | {t['jobs_accepted']} | {t['jobs_lost']} | {t['jobs_unfinished']} | "
            f"{t['jobs_completed_twice']} | {repeated} | {t['acked_writes']:,} | "
            f"{t['acked_writes_lost']:,} | {t['failover_s_max']:.2f} |"
        )
    return "\n".join(lines)


def fuzz_summary() -> str:
    """docs/fuzzing.md: the last schemathesis run against the live stack."""
    report = _json("reports/fuzz/summary.json")
    cases = report["cases"]
    verdict = "No issues found" if report["no_issues"] else "issues found"
    return (
        f"Last run, `{report['command']}` (`reports/fuzz/summary.json`, 2 cores, shared): "
        f"{report['operations']} operations, {report['max_examples']} examples each, "
        f"{cases['generated']:,} cases, **{cases['failed']} failures** (`{cases['generated']} generated, "
        f"{cases['passed']} passed, {cases['skipped']} skipped`, `{verdict}`), in "
        f"{report['seconds']:.0f} s of schemathesis."
    )


BLOCKS: dict[str, Callable[[], str]] = {
    "fuzz-summary": fuzz_summary,
    "redis-failover-table": redis_failover_table,
    "multihost-table": multihost_table,
    "pool-search-replay": pool_search_replay,
    "pool-search-e2e": pool_search_e2e,
    "pool-search-held-out": pool_search_held_out,
    "call-cache-replay": call_cache_replay,
    "rag-passage": rag_passage,
    "pool-size-rag": pool_size_table("reports/pool-size"),
    "pool-size-madke": pool_size_table("reports/pool-size/madke"),
    "styles-table": styles_table,
    "nq100-table": nq100_table,
    "evidence-headline": evidence_headline,
    "evidence-table": evidence_table,
    "models-measured": models_measured,
}
FILES = (
    "README.md",
    "docs/evaluation.md",
    "docs/engine-and-protocols.md",
    "docs/benchmarks-and-reports.md",
    "docs/retrieval.md",
    "docs/deployment.md",
    "docs/fuzzing.md",
)
BLOCK = re.compile(r"(<!-- figures: (?P<name>[a-z0-9-]+)[^>]*-->\n)(?P<body>.*?)(<!-- /figures -->)", re.S)


def rendered(text: str, path: str) -> str:
    """``text`` with every figures block written again; an unknown block name is an error."""

    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in BLOCKS:
            raise SystemExit(f"{path}: unknown figures block {name!r} (known: {', '.join(BLOCKS)})")
        return f"{m.group(1)}{BLOCKS[name]()}\n{m.group(4)}"

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name in FILES:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        fresh = rendered(text, name)
        if fresh != text:
            stale.append(name)
            if not args.check:
                path.write_text(fresh, encoding="utf-8")
    if args.check and stale:
        print(f"figures differ from their reports in {', '.join(stale)}: run {__file__}")
        return 1
    for name in stale:
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The soak's report: a Markdown table of its checks and a PNG of memory and latency over the run with
its faults marked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness.plots import figure, save
from bench.soak_stack import HARNESS


def markdown(report: dict[str, Any], command: str) -> str:
    """The soak's Markdown report: jobs, tokens per key, windows, memory moves and recoveries."""
    j = report["jobs"]
    lines = [
        f"# Soak: {report['minutes']} minutes",
        "",
        f"`{command}`",
        "",
        "Retention (`PARLEY_JOB_TTL_S`, gateway and workers): "
        + (
            f"{report['job_ttl_s']} s: finished jobs expire during the run"
            if report.get("job_ttl_s")
            else "the default (7 days): every finished job is still kept at the end"
        )
        + ".",
        "",
        "| jobs submitted | completed | failed | cancelled | lost | run twice |",
        "|---|---|---|---|---|---|",
        f"| {j['submitted']} | {j['completed']} | {j['failed']} | {j['cancelled']} | {j['lost']} "
        f"| {j['run_twice']} |",
        "",
        "Failed, by reason: " + ("; ".join(f"{r} ({n})" for r, n in j["failed_reasons"].items()) or "none"),
        "",
        "| key | tokens charged | tokens served | charged − served | worst cases kept by cut calls "
        "| served after the deadline, in the grace | served after the client left | reserved left |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, t in report["tokens"].items():
        lines.append(
            f"| {key} | {t['charged']} | {t['served']} | {t['charged_minus_served']} | "
            f"{t['charged_worst_case_for_cut_calls']} | "
            f"{t['served_after_the_deadline_within_the_grace']} | {t['served_after_client_left']} | "
            f"{t['reserved_left']} |"
        )
    lines += [
        "",
        f"Jobs charged other than what was served for them: {report['jobs_charged_not_served']}; jobs with a "
        "call that timed out and was answered within the client's grace, charged exactly: "
        f"{report['jobs_with_timed_out_calls_charged_exactly']}; jobs with a call the server did not "
        "answer within the grace (or a cancel's settlement wait), charged its worst case: "
        f"{report['jobs_charged_worst_case_not_answered_within_the_grace']}; jobs whose call in flight "
        "was cut by a killed worker, charged its worst case: "
        f"{report['jobs_cut_by_a_killed_worker_charged_worst_case']}.",
    ]
    names = [n for n in (report["windows"][0]["rss_mb"] if report["windows"] else []) if n != HARNESS]
    lines += [
        "",
        "| window | requests | p50 ms | p99 ms | "
        + " | ".join(f"{n} RSS MB" for n in names)
        + " | Redis MB | Redis keys | harness RSS MB |",
        "|---|---|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for w in report["windows"]:
        rss = " | ".join(str(w["rss_mb"].get(n)) for n in names)
        lines.append(
            f"| {w['window']} | {w['requests']} | {w['p50_ms']} | {w['p99_ms']} | {rss} | "
            f"{w['redis_used_mb']} | {w['redis_keys']} | {w['rss_mb'].get(HARNESS)} |"
        )
    drift = report.get("drift_after_first_window_pct") or {}
    if len(report["windows"]) > 1:
        moved = ", ".join(
            f"{n} {drift.get(n)} %" for n in [*names, "redis_used_mb"] if drift.get(n) is not None
        )
        lines += [
            "",
            f"Largest move after the first window, from its level: {moved}. The harness column is this "
            "process (load generator, its ledger of every job and request, the scripted LLM), not a "
            "service; its ledger grows with the jobs by design"
            + (f" (harness {drift.get(HARNESS)} %)." if drift.get(HARNESS) is not None else "."),
        ]
        anon = report.get("anon_drift_after_first_window_pct") or {}
        last = report["windows"][-1].get("anon_mb") or {}
        anon_moved = ", ".join(
            f"{n} {anon.get(n)} % (last window {last.get(n)} MB)" for n in names if anon.get(n) is not None
        )
        if anon_moved:
            lines += [
                "",
                f"Anonymous memory alone (RssAnon: heaps, not the pages of mapped files), largest move after "
                f"the first window: {anon_moved}.",
            ]
    lines += ["", "| fault | n | recovery median s | recovery max s |", "|---|---|---|---|"]
    for kind, r in report["recovery_s_by_fault"].items():
        lines.append(f"| {kind} | {r['n']} | {r['median']} | {r['max']} |")
    if report["faults_not_recovered"]:
        lines += ["", "Not recovered: " + json.dumps(report["faults_not_recovered"])]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], latencies: list[tuple[float, float]], path: Path) -> None:
    """Every process's RSS, Redis's memory and every gateway request's latency over the run, a line
    at each fault."""
    samples = report["samples"]
    fig, (ax1, ax2, ax3) = figure((10, 9), nrows=3, ncols=1, sharex=True)
    ts = [s["t"] / 60 for s in samples]
    for name in [k for k in (samples[0] if samples else {}) if k not in ("t", "redis_used_mb", "redis_keys")]:
        ax1.plot(ts, [s.get(name) for s in samples], label=name)
    ax1.set_ylabel("RSS (MB)")
    ax1.legend(fontsize=7)
    ax2.plot(ts, [s.get("redis_used_mb") for s in samples], label="Redis used memory")
    ax2.set_ylabel("Redis (MB)")
    if latencies:
        ax3.scatter([t / 60 for t, _ in latencies], [s * 1000 for _, s in latencies], s=1, alpha=0.3)
        ax3.set_yscale("log")
    ax3.set_ylabel("gateway latency (ms)")
    ax3.set_xlabel("minutes")
    for f in report["faults"]:
        for ax in (ax1, ax2, ax3):
            ax.axvline(f["at_s"] / 60 if "at_s" in f else 0, color="red", alpha=0.2)
        ax3.annotate(
            f["kind"],
            (f.get("at_s", 0) / 60, 1),
            fontsize=6,
            rotation=90,
            xycoords=("data", "axes fraction"),
            va="top",
        )
    save(fig, path, dpi=110)

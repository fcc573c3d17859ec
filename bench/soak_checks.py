"""The soak's checks, computed from what the run recorded: jobs submitted / completed / failed (by reason)
/ cancelled / lost / run twice; tokens charged (``/v1/usage``) against tokens served (the LLM's count)
per key and job by job; gateway latency and every process's memory per window and how far each moved
after the first window; how long each fault took to recover from. The report's JSON is what
``tally`` returns."""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.harness.stats import upper_percentile_ms
from bench.soak_ledger import KEYS, TERMINAL, Job, Ledger
from bench.soak_stack import ANON


@dataclass
class SoakRecord:
    """What a run gathered besides the ledger: each ended job's own account read from the store, the
    jobs a killed worker cut, the faults and the memory samples."""

    ledger: Ledger
    process_names: list[str]
    job_charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    cut_by_kill: set[str] = field(default_factory=set)
    faults: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


def tally(
    record: SoakRecord, usage: dict[str, dict[str, Any]], *, minutes: float, window_minutes: float,
    job_ttl_s: int | None,
) -> dict[str, Any]:  # fmt: skip
    """The report: every check over the whole run, by window, by key and job by job."""
    jobs = list(record.ledger.jobs.values())
    windows = by_window(record, minutes, window_minutes)
    accounts = job_accounts(record, jobs, usage)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for f in record.faults:
        if f.get("recovered_s") is not None:
            by_kind[f["kind"]].append(float(f["recovered_s"]))
    return {
        "minutes": minutes,
        "job_ttl_s": job_ttl_s,
        # The yardstick: each process's RSS and Redis memory against their level after the
        # first window (its last sample), the largest move in any later window.
        "drift_after_first_window_pct": drift(windows),
        # The same for anonymous memory alone: a leak shows here; mapped files (a model's weights, a
        # shard's rotating write-ahead log) move VmRSS without being the process's to free.
        "anon_drift_after_first_window_pct": drift(windows, "anon_mb"),
        "jobs": job_outcomes(record, jobs),
        **accounts,
        "gateway_errors": dict(record.ledger.errors),
        "windows": windows,
        "faults": record.faults,
        "recovery_s_by_fault": {
            k: {"n": len(v), "max": max(v), "median": round(statistics.median(v), 1)}
            for k, v in by_kind.items()
        },
        "faults_not_recovered": [f for f in record.faults if f.get("recovered_s") is None],
        "samples": record.samples,
    }


def job_outcomes(record: SoakRecord, jobs: list[Job]) -> dict[str, Any]:
    """How the jobs ended: none may be lost (not terminal) or run twice."""
    statuses = Counter(j.status for j in jobs)
    reasons = Counter(failure_reason(j.error) for j in jobs if j.status == "failed")
    # Run twice: more final (summary) calls served for a job than it had attempts, i.e. two runs of
    # it at once or a finished job run again. A job whose worker was killed while its summary was
    # in flight resumes from its last round and asks for the summary once more: repeated, not twice.
    attempts = {j.tag: int(record.job_charges.get(j.job_id, {}).get("attempts") or 1) for j in jobs}
    summaries = record.ledger.summaries
    twice = sorted(t for t, n in summaries.items() if n > max(1, attempts.get(t, 1)))
    repeated = sorted(t for t, n in summaries.items() if 1 < n <= attempts.get(t, 1))
    return {
        "submitted": len(jobs),
        "completed": statuses["completed"],
        "failed": statuses["failed"],
        "failed_reasons": dict(reasons),
        "cancelled": statuses["cancelled"],
        "lost": sum(n for s, n in statuses.items() if s not in TERMINAL),
        "not_terminal": {s: n for s, n in statuses.items() if s not in TERMINAL},
        "run_twice": len(twice),
        "run_twice_tags": twice[:20],
        "final_call_repeated_after_a_lost_worker": len(repeated),
        "by_kind": dict(Counter(j.kind for j in jobs)),
    }


def job_accounts(record: SoakRecord, jobs: list[Job], usage: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Tokens charged against tokens served, per key and job by job.

    Job by job: what the store charged against what the LLM served for that job's question. A call that
    timed out is charged what the server served when it answered within the client's grace (those jobs
    are counted: charged exactly all the same); one the server answered only after the client had cut
    it (the grace, or a cancel's settlement wait, ran out) keeps its worst case, and so does a call cut
    by a killed worker: those jobs are listed apart. Every other job must be charged exactly."""
    ledger = record.ledger
    per_key = {}
    for key in KEYS:
        charged = int(usage.get(key, {}).get("tokens", 0))
        served = ledger.served[key]
        per_key[key] = {
            "charged": charged,
            "served": served,
            "served_after_the_deadline_within_the_grace": ledger.in_grace[key],
            "served_after_client_left": ledger.abandoned[key],
            "charged_minus_served": charged - served,
            "reserved_left": usage.get(key, {}).get("reserved"),
        }
    mismatched: list[dict[str, Any]] = []
    not_in_grace: list[dict[str, Any]] = []
    killed: list[dict[str, Any]] = []
    exact_after_timeout = 0
    for job in jobs:
        account = record.job_charges.get(job.job_id, {})
        served = ledger.served_tag[job.tag]
        row = {
            "key": job.key, "tag": job.tag, "job_id": job.job_id, "status": job.status,
            "error": job.error,
            "attempts": account.get("attempts"), "charged": account.get("charged"), "served": served,
            "replies_within_the_grace": ledger.in_grace_tag[job.tag],
            "served_after_client_left": ledger.abandoned_tag[job.tag],
        }  # fmt: skip
        if account.get("charged") == served:
            exact_after_timeout += 1 if ledger.in_grace_tag[job.tag] else 0
            continue
        over = (account.get("charged") or 0) > served
        if job.job_id in record.cut_by_kill and over:
            killed.append(row)
        elif ledger.abandoned_tag[job.tag] and over:
            not_in_grace.append(row)
        else:
            mismatched.append(row)
    # What each key was charged over what was served, job by job, for the jobs that keep a cut
    # call's worst case: a key's total must differ from what was served by exactly that.
    worst_case_excess: Counter[str] = Counter()
    for row in killed + not_in_grace:
        worst_case_excess[row["key"]] += (row["charged"] or 0) - row["served"]
    for key in KEYS:
        per_key[key]["charged_worst_case_for_cut_calls"] = worst_case_excess[key]
    return {
        "tokens": per_key,
        "jobs_charged_not_served": len(mismatched),
        "jobs_charged_not_served_list": mismatched[:50],
        "jobs_with_timed_out_calls_charged_exactly": exact_after_timeout,
        "jobs_charged_worst_case_not_answered_within_the_grace": len(not_in_grace),
        "jobs_not_answered_within_the_grace": not_in_grace[:20],
        "jobs_cut_by_a_killed_worker_charged_worst_case": len(killed),
        "jobs_cut_by_a_killed_worker": killed[:20],
    }


def by_window(record: SoakRecord, minutes: float, window_minutes: float) -> list[dict[str, Any]]:
    """Per window of ``window_minutes``: gateway requests and their p50/p99, and the last memory sample
    of every process and of Redis."""
    window_s = window_minutes * 60
    n_windows = max(1, int(minutes * 60 // window_s + (1 if minutes * 60 % window_s else 0)))
    windows = []
    for w in range(n_windows):
        lo, hi = w * window_s, (w + 1) * window_s
        lat = [s for t, s in record.ledger.latencies if lo <= t < hi]
        rows = [r for r in record.samples if lo <= r["t"] < hi]
        windows.append(
            {
                "window": f"{lo / 60:.0f}-{hi / 60:.0f} min",
                "requests": len(lat),
                "p50_ms": upper_percentile_ms(lat, 50),
                "p99_ms": upper_percentile_ms(lat, 99),
                "rss_mb": {name: last([r.get(name) for r in rows]) for name in record.process_names},
                "anon_mb": {
                    name: last([r.get(f"{name}{ANON}") for r in rows]) for name in record.process_names
                },
                "redis_used_mb": last([r.get("redis_used_mb") for r in rows]),
                "redis_keys": last([r.get("redis_keys") for r in rows]),
            }
        )
    return windows


def drift(windows: list[dict[str, Any]], measure: str = "rss_mb") -> dict[str, float | None]:
    """Per process (and, for RSS, Redis used memory): the largest change in any later window from the
    first window's level, in percent; None where a level is missing."""
    if not windows:
        return {}
    series = {name: [w[measure].get(name) for w in windows] for name in windows[0][measure]}
    if measure == "rss_mb":
        series["redis_used_mb"] = [w["redis_used_mb"] for w in windows]
    out: dict[str, float | None] = {}
    for name, values in series.items():
        base, later = values[0], [v for v in values[1:] if v is not None]
        out[name] = round(max(abs(v - base) for v in later) / base * 100, 1) if base and later else None
    return out


def last(values: list[Any]) -> Any:
    """The last value that is not None (a sample taken while a fault had the process down has none)."""
    present = [v for v in values if v is not None]
    return present[-1] if present else None


def failure_reason(error: str | None) -> str:
    """A failed job's error with its job id and numbers masked, so failures group by reason."""
    text = re.sub(r"job_[0-9a-f]{32}", "job_…", error or "no reason given")
    return re.sub(r"\d+(\.\d+)?", "N", text)[:120]

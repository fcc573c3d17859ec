"""Workers on several hosts, with the links between them cut and slowed: every job must still end, none
lost, none run twice, each charged what the LLM served for it, and a client must see 503 with
``Retry-After`` (never a hang or a 500) while the gateway cannot reach Redis.

Each host is a Linux network namespace on one bridge (``bench.multihost_net``): Redis (an ACL user with
a password; with ``--secured`` TLS only and the URL given as a secret file), the gateway, the
retriever, the scripted LLM, two worker hosts and the clients, configured as docs/deployment.md's
"Workers on several hosts" says (``bench.multihost_stack``). The faults (``bench.multihost_faults``),
one at a time under a steady load of debates, each ``--repeats`` times: a worker host cut from Redis
(``--redis-cut-s``, 30 s), from the LLM and from the retriever (``--cut-s``), the gateway cut from
Redis while clients submit and stream (``--gateway-cut-s``), and delay plus dropped packets on a
worker's links. A cut blackholes packets (iptables), so connections hang as across a real partition.
Recovery is the time from the heal until every job of the fault has ended and a new debate has
completed. The soak's ledger and checks (``bench.soak_ledger``, ``bench.soak_checks``) count jobs and
tokens. JSON, a Markdown table and a PNG of recovery times go to ``--out``.

Needs root, iproute2, iptables and redis-server (and, for ``--secured``, the ``cryptography`` package).

    .venv/bin/python -m bench.multihost --repeats 3 --out reports/multihost     # the benchmark
    .venv/bin/python -m bench.multihost --repeats 1 --redis-cut-s 10 --cut-s 8 --out /tmp/multihost
    .venv/bin/python -m bench.multihost --repeats 1 --secured --out /tmp/multihost-tls   # Redis over TLS
    .venv/bin/python -m bench.multihost --render-only --out reports/multihost   # the table again
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.harness.cli import study_parser
from bench.harness.plots import figure, save
from bench.harness.processes import exit_on_sigterm
from bench.harness.reports import command_line, machine, table_head, utc_date, write_json, write_markdown
from bench.multihost_faults import FAULTS, HANG_S, FaultOptions, FaultRunner
from bench.multihost_net import Network, available, enter, remove_stale
from bench.multihost_stack import HOSTS, MultihostStack
from bench.soak_checks import SoakRecord, job_accounts, job_outcomes
from bench.soak_ledger import KEYS, SETTLE_S, GatewayClient, Ledger
from parley_testing.processes import ROOT

__all__ = ["FAULTS", "main"]
TARGET_RECOVERY_S = 120.0


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Make the hosts, start the service on them, run every fault ``--repeats`` times, tally; the
    namespaces and processes are removed however it ends."""
    remove_stale()
    net = Network(HOSTS, subnet=args.subnet).create()
    ledger = Ledger()
    stack = MultihostStack(net, tmp, ledger, args.llm_latency, secured=args.secured)
    try:
        # This thread is the clients' host from here on: every request the harness makes comes from it.
        enter(net.ns("client"))
        started = time.monotonic()
        stack.start_all()
        print(f"[multihost] {len(HOSTS)} hosts up in {time.monotonic() - started:.0f} s ({tmp})", flush=True)
        shown = stack.password_shown()  # where a secured run must show it: nowhere
        gw = GatewayClient(stack.api_url, ledger)
        opts = FaultOptions(
            redis_cut_s=args.redis_cut_s, cut_s=args.cut_s, gateway_cut_s=args.gateway_cut_s,
            delay_s=args.delay_s, drop=args.drop,
            submit_every_s=args.submit_every, drain_s=args.drain,
        )  # fmt: skip
        runner = FaultRunner(stack, net, gw, opts)
        kinds = args.faults.split(",") if args.faults else list(FAULTS)
        faults = [runner.run(kind, r + 1) for r in range(args.repeats) for kind in kinds]
        time.sleep(SETTLE_S)  # calls in flight when a job ended are settled: accounts are final
        report = tally(stack, gw, ledger, faults, runner.cut_jobs)
        report["redis_password_shown_by"] = shown
        return report
    finally:
        stack.stop()
        net.destroy()


def tally(
    stack: MultihostStack, gw: GatewayClient, ledger: Ledger, faults: list[dict[str, Any]], cut_jobs: set[str]
) -> dict[str, Any]:
    """Each fault's jobs by outcome (the soak's checks), every job's account, and the client's view."""
    record = SoakRecord(ledger, [], cut_by_kill=cut_jobs, faults=faults)
    record.job_charges = stack.job_charges(list(ledger.jobs))
    usage = {}
    for key in KEYS:
        resp = gw.call(key, "GET", "/v1/usage")
        usage[key] = resp.json()["today"] if resp is not None and resp.status_code == 200 else {}
    accounts = job_accounts(record, list(ledger.jobs.values()), usage)
    mismatched = {row["job_id"] for row in accounts["jobs_charged_not_served_list"]}
    for f in faults:
        jobs = [ledger.jobs[j] for j in f["job_ids"] if j in ledger.jobs]
        f["jobs"] = job_outcomes(record, jobs)
        f["jobs_charged_not_served"] = sum(1 for j in jobs if j.job_id in mismatched)
        f["gateway_cut_ok"] = gateway_cut_ok(f) if f["kind"] == "gateway_redis" else None
        # How the jobs the cut host was running ended: by it after the heal, or by another worker
        # (a second attempt) once their lease had lapsed.
        f["jobs_on_the_cut_host"] = [
            {"job_id": j, **record.job_charges.get(j, {})} for j in f.get("jobs_on_the_cut_host", [])
        ]
    by_kind: dict[str, list[float]] = defaultdict(list)
    for f in faults:
        if f["recovery_s"] is not None:
            by_kind[f["kind"]].append(f["recovery_s"])
    return {
        "machine": machine(),
        "date": utc_date(),
        "hosts": {h: stack.net.ip(h) for h in HOSTS},
        "redis": "rediss:// (TLS), an ACL user, the URL in a secret file"
        if stack.store.tls
        else "redis://, an ACL user with a password in the URL",
        "faults": faults,
        "recovery_s_by_fault": {
            k: {"n": len(v), "median": round(statistics.median(v), 1), "max": max(v)}
            for k, v in by_kind.items()
        },
        "totals": {
            "jobs": sum(f["jobs"]["submitted"] for f in faults),
            "lost": sum(f["jobs"]["lost"] for f in faults),
            "run_twice": sum(f["jobs"]["run_twice"] for f in faults),
            "failed": sum(f["jobs"]["failed"] for f in faults),
            "not_recovered": sum(1 for f in faults if f["recovery_s"] is None),
            "slowest_recovery_s": max((f["recovery_s"] or 0 for f in faults), default=0),
            "keys_naming_two_jobs": sum(len(f["submissions"]["keys_naming_two_jobs"]) for f in faults),
        },
        **accounts,
        "gateway_errors": dict(ledger.errors),
    }


def gateway_cut_ok(fault: dict[str, Any]) -> bool:
    """Whether every answer a client got while the gateway could not reach Redis was a 503 with
    ``Retry-After`` within ``HANG_S`` (the stream already open may break: it is resumed), and the
    stream was pieced together whole."""
    answers = [a for rows in fault.get("client_view", {}).values() for a in rows]
    answers += fault.get("stream", {}).get("during_cut", [])
    refused = [a for a in answers if "status" in a]
    good = all(a["status"] == 503 and a.get("retry_after") and a["s"] < HANG_S for a in refused)
    stream = fault.get("stream", {})
    whole = (
        bool(stream.get("terminal")) and stream.get("same_as_full_replay") and not stream.get("duplicates")
    )
    whole = whole and not stream.get("broken")  # an open stream ends cleanly, it does not break
    return bool(refused) and good and bool(whole)


def client_cell(f: dict[str, Any]) -> str:
    """What a client saw during a gateway cut, in a few words."""
    if f["kind"] != "gateway_redis":
        return "–"
    answers = [a for rows in f.get("client_view", {}).values() for a in rows]
    statuses = sorted({str(a.get("status", a.get("error"))) for a in answers})
    slowest = max((a["s"] for a in answers), default=0)
    stream = f.get("stream", {})
    return (
        f"{'/'.join(statuses)} with Retry-After, slowest {slowest} s; stream resumed "
        f"{'whole' if stream.get('same_as_full_replay') else 'NOT whole'} after {stream.get('connections')} "
        "connections"
    )


def cut_host_cell(f: dict[str, Any]) -> str:
    """How the debates the cut (or slowed) host was running ended: status and attempts of each."""
    jobs = f.get("jobs_on_the_cut_host") or []
    if not jobs:
        return "–"
    ends = Counter(f"{j.get('status')} after {j.get('attempts')} attempt(s)" for j in jobs)
    return "; ".join(f"{n} {end}" for end, n in ends.items())


def markdown(report: dict[str, Any], command: str) -> list[str]:
    t = report["totals"]
    lines = [
        "# Workers on several hosts: partitions and slow links",
        "",
        f"`{command}` ({report['machine']}, {report['date']}). Each host a network namespace; a cut "
        "blackholes packets (iptables DROP), a slow link adds delay (a user-space proxy) and drops packets. "
        f"Redis: {report.get('redis', 'redis://, an ACL user with a password in the URL')}.",
        "",
        f"Jobs: {t['jobs']}; lost {t['lost']}; run twice {t['run_twice']}; failed {t['failed']}; faults not "
        f"recovered {t['not_recovered']}; slowest recovery {t['slowest_recovery_s']} s (target: every job "
        f"ended within {TARGET_RECOVERY_S:.0f} s of the heal); Idempotency-Keys that named two jobs "
        f"{t['keys_naming_two_jobs']}; jobs charged other than what was served for them "
        f"{report['jobs_charged_not_served']} (and "
        f"{report['jobs_cut_by_a_killed_worker_charged_worst_case']} whose call in flight was cut, charged "
        "its worst case).",
        "",
        *table_head(
            *("fault", "#", "cut s", "jobs", "completed", "lost", "run twice", "failed (reason)"),
            *("recovery s", "debates the cut host was running", "client during the cut"),
        ),
    ]
    for f in report["faults"]:
        j = f["jobs"]
        reasons = "; ".join(f"{r} ({n})" for r, n in j["failed_reasons"].items())
        failed = f"{j['failed']}" + (f" ({reasons})" if reasons else "")
        lines.append(
            f"| {f['kind']} | {f['repeat']} | {f['cut_s']} | {j['submitted']} | {j['completed']} "
            f"| {j['lost']} | {j['run_twice']} | {failed} | {f['recovery_s']} | {cut_host_cell(f)} "
            f"| {client_cell(f)} |"
        )
    lines += ["", "| fault | n | recovery median s | recovery max s |", "|---|---|---|---|"]
    for kind, r in report["recovery_s_by_fault"].items():
        lines.append(f"| {kind} | {r['n']} | {r['median']} | {r['max']} |")
    return lines


def plot(report: dict[str, Any], path: Path) -> None:
    """Each fault's recovery times (one dot per repeat), the two-minute target as a line."""
    fig, ax = figure((8, 4))
    kinds = list(dict.fromkeys(f["kind"] for f in report["faults"]))
    for x, kind in enumerate(kinds):
        ys = [f["recovery_s"] for f in report["faults"] if f["kind"] == kind and f["recovery_s"] is not None]
        ax.scatter([x] * len(ys), ys, s=30)
    ax.axhline(TARGET_RECOVERY_S, color="red", alpha=0.4, label="target")
    ax.set_xticks(range(len(kinds)), kinds, rotation=15)
    ax.set_ylabel("recovery after the heal (s)")
    ax.set_ylim(bottom=0)
    ax.legend()
    save(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--faults", default="", help="only these kinds, comma-separated (default: all)")
    parser.add_argument("--redis-cut-s", type=float, default=30.0, help="a worker host cut from Redis")
    parser.add_argument("--cut-s", type=float, default=15.0, help="the other worker cuts and the slow link")
    parser.add_argument(
        "--gateway-cut-s",
        type=float,
        default=20.0,
        help="the gateway cut from Redis: longer than an open event stream takes to notice (about 2 x "
        "(PARLEY_API_SSE_BLOCK_MS + PARLEY_API_REDIS_TIMEOUT_S)), so its client reconnects during the cut",
    )
    parser.add_argument("--delay-s", type=float, default=1.0, help="slow link: delay added each way")
    parser.add_argument("--drop", type=float, default=0.05, help="slow link: share of packets dropped")
    parser.add_argument("--submit-every", type=float, default=1.0, help="seconds between debates")
    parser.add_argument("--llm-latency", type=float, default=0.5, help="the scripted LLM's reply time")
    parser.add_argument("--drain", type=float, default=180.0, help="seconds the jobs may take after a heal")
    parser.add_argument(
        "--secured",
        action="store_true",
        help="Redis over TLS only (rediss://, a throwaway CA), its URL given as a secret file "
        "(PARLEY_*_REDIS_URL_FILE)",
    )
    parser.add_argument("--subnet", default="10.77.0", help="the hosts' /24 (only inside the namespaces)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "multihost")
    parser.add_argument(
        "--render-only", action="store_true", help="write the table and the plot again from --out's JSON"
    )
    args = parser.parse_args(argv)
    if args.render_only:
        report = json.loads((args.out / "multihost.json").read_text(encoding="utf-8"))
        return write_report(report, args.out)
    unknown = set(args.faults.split(",")) - set(FAULTS) if args.faults else set()
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    why = available()
    if why is not None:
        raise SystemExit(f"bench.multihost: {why}")
    tmp = Path(tempfile.mkdtemp(prefix="parley-multihost-"))
    exit_on_sigterm()
    report = run(args, tmp)
    command = command_line("bench.multihost", argv)
    report["command"] = command
    report["logs"] = str(tmp)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "multihost.json", report)
    return write_report(report, args.out)


def write_report(report: dict[str, Any], out: Path) -> dict[str, Any]:
    """The Markdown table and the plot of a run's report (its JSON already in ``out``)."""
    print(write_markdown(out / "multihost.md", markdown(report, report["command"])))
    plot(report, out / "recovery.png")
    return report


if __name__ == "__main__":
    main()

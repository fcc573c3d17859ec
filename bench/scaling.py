"""Scaling benchmark: questions per hour with 1, 2 and 4 worker processes and 1, 2 and 4 LLM replicas.

Everything is a real process on loopback, as in a deployment: a private redis-server, the gateway
(``parley api``), R scripted OpenAI-compatible servers of fixed latency, each serving at most
``--capacity`` requests at a time (like a llama.cpp server with that many slots: more wait inside
it), and W Celery worker nodes (``parley worker``, each its own main process, as on separate hosts)
that share the Redis and list the R replicas in ``PARLEY_LLM_BASE_URL``. The LLM does no work, so
what is measured is how the service itself scales, not a model's speed.

Three series, each run as one batch per point (``--items-per-unit`` x k debates, POST to the last
finished debate):

* ``workers``: W = 1, 2, 4 worker processes against 4 replicas with room to spare: the workers bound
  the throughput;
* ``replicas``: R = 1, 2, 4 replicas, each serving ``--replica-capacity`` request at a time, under 4
  worker nodes running ``--per-node-saturate`` debates each, more than the replicas can serve: the
  replicas bound it, so it shows how evenly calls are spread (least outstanding requests counted
  over all worker processes, one debate to one replica; ``--local-counts``: each process counts its
  own calls only, for comparison);
* ``both``: W = R = 1, 2, 4 together (one debate per worker, ``--capacity`` per replica).

Each point's efficiency is its questions per hour over k times the series' first point (1.0 =
linear). The replicas record every request's arrival, start and end (``GET /v1/timings``), so each
point also says how the replicas spent the wall (``replica_load``): the share of their slots busy,
the share of time a replica idled while another had calls waiting (``misplaced``: the choice of
replica's fault) and while nothing waited anywhere (``starved``: the offered load's or the batch
tail's). Writes ``scaling.json``, ``scaling.md`` and ``scaling.png`` to ``--out``.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python -m bench.scaling --out reports/scaling`` (about 5 minutes on
2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.harness.batches import job_times, run_batch
from bench.harness.cli import study_parser
from bench.harness.plots import figure, save
from bench.harness.processes import start_scripted_llm
from bench.harness.reports import command_line, report_head, write_json, write_markdown
from bench.harness.stack import GatewayStack
from parley_testing.processes import ROOT, WorkerProcess, worker_env
from parley_testing.scripted_llm import free_port

# No retrieval; the judge agrees in round 1: two debaters together, then the judge, then the summary
# (4 calls, 3 LLM latencies one after another).
CONFIG = {"knowledge": "none", "rounds": 3}

# Each request's debate, as the replicas see it: the item id in the question (see ``run_point``).
LABEL_PATTERN = r"capital of country (\S+?)\?"


@dataclass(frozen=True)
class Point:
    series: str
    k: int  # the scaled quantity (workers, replicas or both)
    workers: int  # worker nodes
    per_node: int  # debates each node runs at once (its prefork processes)
    replicas: int
    capacity: int  # requests each replica serves at a time


def plan(args: argparse.Namespace) -> list[Point]:
    ks = [int(k) for k in args.ks.split(",")]
    points: list[Point] = []
    for series in args.series.split(","):
        for k in ks:
            if series == "workers":
                points.append(Point(series, k, k, 1, max(ks), args.capacity))
            elif series == "replicas":
                points.append(Point(series, k, max(ks), args.per_node_saturate, k, args.replica_capacity))
            elif series == "both":
                points.append(Point(series, k, k, 1, k, args.capacity))
            else:
                raise SystemExit(f"unknown series {series!r} (workers, replicas, both)")
    return points


class ScalingStack(GatewayStack):
    """Redis, the gateway and the scripted replicas, shared by every point (workers change)."""

    def __init__(self, tmp: Path, args: argparse.Namespace) -> None:
        super().__init__(tmp)
        self.args = args
        self.replica_ports: dict[int, list[int]] = {}
        self.start({"PARLEY_API_METRICS_PORT": "0"})

    def replica_urls(self, count: int, capacity: int) -> list[str]:
        """``count`` scripted servers serving ``capacity`` requests at a time (started once each)."""
        ports = self.replica_ports.setdefault(capacity, [])
        while len(ports) < count:
            log = self.tmp / f"llm-{len(self.procs)}.log"
            replica = start_scripted_llm(
                self.env, log, latency_s=self.args.latency, capacity=capacity, label_pattern=LABEL_PATTERN
            )
            self.procs.append(replica.proc)
            ports.append(replica.port)
        return [f"http://127.0.0.1:{p}/v1" for p in ports[:count]]


def start_workers(stack: ScalingStack, point: Point, urls: list[str], tag: str) -> list[WorkerProcess]:
    """W worker nodes (each a main process and ``per_node`` pool processes), started side by side."""
    env = worker_env(
        stack.redis.url,
        ",".join(urls),
        PARLEY_LLM_MAX_CONCURRENCY=str(point.capacity),
        PARLEY_WORKER_WORKER_MAX_TASKS_PER_CHILD="100000",
        PARLEY_WORKER_SWEEP_INTERVAL_S="0",
        # 0: each worker process chooses replicas by its own calls in flight only (for comparison).
        PARLEY_WORKER_REPLICA_LOAD_TTL_S="0" if stack.args.local_counts else "3",
    )
    workers = []
    for i in range(point.workers):
        node_env = {**env, "PARLEY_WORKER_METRICS_PORT": str(free_port())}
        log = stack.tmp / f"worker-{tag}-{i}.log"
        workers.append(WorkerProcess(node_env, log, concurrency=point.per_node, name=f"{tag}n{i}"))
    errors: list[BaseException] = []

    def start(w: WorkerProcess) -> None:
        try:
            w.start(timeout_s=120)
        except BaseException as exc:  # reported below, after every start has ended
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for w in workers:
            w.stop()
        raise errors[0]
    time.sleep(1.0)  # every pool process connected to the broker
    return workers


def replica_attempts(workers: list[WorkerProcess]) -> dict[str, float]:
    """Attempts per replica, summed over the nodes' /metrics (``parley_llm_replica_attempts_total``)."""
    totals: dict[str, float] = {}
    pattern = re.compile(r"^parley_llm_replica_attempts_total\{([^}]*)\} ([0-9.e+]+)$")
    for w in workers:
        port = w.env["PARLEY_WORKER_METRICS_PORT"]
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            m = pattern.match(line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("outcome") == "ok":
                totals[labels["replica"]] = totals.get(labels["replica"], 0) + float(m.group(2))
    return dict(sorted(totals.items()))


def replica_load(urls: list[str], t0: float, t1: float, capacity: int) -> dict[str, Any]:
    """How the replicas spent the point's wall [t0, t1], from their own request times.

    Per replica: the share of its slots busy, and the mean wait of a request inside it for a slot.
    Over the wall: ``misplaced`` is the share of time some replica had a free slot while another had
    requests waiting (calls in the wrong place: what a better choice of replica could win back);
    ``starved`` the share with a free slot somewhere and nothing waiting anywhere (no call to give it:
    the offered load or the batch's tail, not the choice of replica); ``spread`` the time-averaged gap
    in requests held (served or waiting) between the most and the least loaded replica. Also how many
    debates made their first call to each replica, and the mean number of replicas a debate's calls
    went to."""
    per: list[list[dict[str, Any]]] = []
    for url in urls:
        rows = httpx.get(url + "/timings", params={"since": t0 - 1}, timeout=10).json()["timings"]
        per.append([r for r in rows if r["arrived"] >= t0 - 0.5 and r["ended"] <= t1 + 0.5])
    wall = max(1e-9, t1 - t0)
    # Events over the wall: +1/-1 on each replica's busy slots and waiting requests.
    events: list[tuple[float, int, str, int]] = []
    for i, rows in enumerate(per):
        for r in rows:
            events += [(r["arrived"], i, "wait", 1), (r["started"], i, "wait", -1)]
            events += [(r["started"], i, "busy", 1), (r["ended"], i, "busy", -1)]
    events.sort(key=lambda e: (e[0], e[3]))
    busy = [0] * len(urls)
    waiting = [0] * len(urls)
    misplaced = starved = spread = 0.0
    last = t0
    for t, i, kind, delta in events:
        t = min(max(t, t0), t1)
        span = t - last
        free = any(b < capacity for b in busy)
        if span > 0 and free:
            if any(w > 0 for w in waiting):
                misplaced += span
            else:
                starved += span
        held = [b + w for b, w in zip(busy, waiting, strict=True)]
        spread += span * (max(held) - min(held))
        last = t
        (busy if kind == "busy" else waiting)[i] += delta
    if t1 > last and any(b < capacity for b in busy):
        starved += t1 - last
    first: dict[str, tuple[float, int]] = {}
    seen: dict[str, set[int]] = {}
    for i, rows in enumerate(per):
        for r in rows:
            if r["label"] is None:
                continue
            if r["label"] not in first or r["arrived"] < first[r["label"]][0]:
                first[r["label"]] = (r["arrived"], i)
            seen.setdefault(r["label"], set()).add(i)
    starts = [0] * len(urls)
    for _, i in first.values():
        starts[i] += 1
    return {
        "busy": [round(sum(r["ended"] - r["started"] for r in rows) / (wall * capacity), 3) for rows in per],
        "wait_s": [
            round(sum(r["started"] - r["arrived"] for r in rows) / max(1, len(rows)), 3) for rows in per
        ],
        "misplaced": round(misplaced / wall, 3),
        "spread": round(spread / wall, 2),
        "starved": round(starved / wall, 3),
        "debates_started": starts,
        "replicas_per_debate": round(sum(len(v) for v in seen.values()) / max(1, len(seen)), 2),
    }


def run_point(stack: ScalingStack, point: Point, items: int, tag: str) -> dict[str, Any]:
    urls = stack.replica_urls(point.replicas, point.capacity)
    workers = start_workers(stack, point, urls, tag)
    try:
        batch = [
            {"id": f"{tag}-{i}", "question": f"What is the capital of country {tag}-{i}?"}
            for i in range(items)
        ]
        t0, rows = run_batch(stack.api_url, batch, CONFIG, poll_s=0.25)
        finished = job_times(stack.redis, rows)
        completed = [row for row in rows if row["status"] == "completed"]
        calls = sum(row["result"]["usage"]["calls"] for row in completed)
        wall = max(finished) - t0
        spread = replica_attempts(workers)
        load = replica_load(urls, t0, max(finished), point.capacity)
    finally:
        for w in workers:
            w.stop()
    return {
        "series": point.series,
        "k": point.k,
        "worker_nodes": point.workers,
        "debates_per_node": point.per_node,
        "replicas": point.replicas,
        "replica_capacity": point.capacity,
        "items": items,
        "completed": len(completed),
        "calls_per_debate": round(calls / max(1, len(completed)), 2),
        "wall_s": round(wall, 2),
        "questions_per_hour": round(len(completed) / wall * 3600, 0),
        "replica_calls": spread,
        "replica_load": load,
    }


def efficiency(rows: list[dict[str, Any]]) -> None:
    """Each point's questions per hour over k x its series' first point's (1.0 = linear)."""
    for series in {r["series"] for r in rows}:
        points = sorted((r for r in rows if r["series"] == series), key=lambda r: r["k"])
        base = points[0]
        for r in points:
            ideal = base["questions_per_hour"] * r["k"] / base["k"]
            r["linear_questions_per_hour"] = round(ideal, 0)
            r["efficiency"] = round(r["questions_per_hour"] / ideal, 3) if ideal else None


def markdown(report: dict[str, Any]) -> str:
    lines = [
        *report_head(
            "Scaling with worker processes and LLM replicas",
            f"Scripted LLM of fixed latency {report['latency_s']} s per call; "
            f"{report['cpu_count']} CPUs ({report['machine']}). Command: `{report['command']}`",
        ),
        "| series | worker nodes × debates each | replicas × capacity | debates | wall s | questions/h | "
        "linear | efficiency | calls per replica | replicas busy % | misplaced % | starved % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["points"]:
        spread = " / ".join(f"{v:.0f}" for v in r["replica_calls"].values()) or "–"
        load = r.get("replica_load") or {}
        busy = " / ".join(f"{100 * b:.0f}" for b in load.get("busy", [])) or "–"
        lines.append(
            f"| {r['series']} (k={r['k']}) | {r['worker_nodes']} × {r['debates_per_node']} | "
            f"{r['replicas']} × {r['replica_capacity']} | {r['completed']}/{r['items']} | {r['wall_s']} | "
            f"{r['questions_per_hour']:.0f} | {r['linear_questions_per_hour']:.0f} | {r['efficiency']:.2f} | "
            f"{spread} | {busy} | {100 * load.get('misplaced', 0):.0f} | {100 * load.get('starved', 0):.0f} |"
        )
    counts = (
        "each worker process's own calls in flight only (`--local-counts`)"
        if report.get("local_counts")
        else "the calls in flight of all worker processes (shared through Redis)"
    )
    lines += [
        "",
        "Efficiency: questions per hour over k times the series' k=1 point. `workers`: W worker nodes "
        "(one debate each) against replicas with room to spare; `replicas`: R replicas under more "
        f"debates than they can serve; `both`: W = R. Replicas chosen by {counts}.",
        "",
        "From the replicas' own request times over the wall: *replicas busy*, the share of each one's "
        "slots serving; *misplaced*, the share of time some replica had a free slot while another had "
        "calls waiting (what a better choice of replica could win back); *starved*, a free slot and "
        "nothing waiting anywhere (the offered load and the batch's tail, not the choice; 100 % where "
        "the replicas have room to spare, as in `workers` and `both`).",
    ]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    fig, ax = figure((6.5, 4.2))
    for series in dict.fromkeys(r["series"] for r in report["points"]):
        pts = sorted((r for r in report["points"] if r["series"] == series), key=lambda r: r["k"])
        ks = [p["k"] for p in pts]
        ax.plot(ks, [p["questions_per_hour"] for p in pts], marker="o", label=f"{series}")
        ax.plot(ks, [p["linear_questions_per_hour"] for p in pts], linestyle=":", color="grey")
    ax.set_xlabel("k (worker processes, replicas, or both)")
    ax.set_ylabel("questions per hour")
    ax.set_xticks(sorted({r["k"] for r in report["points"]}))
    ax.set_title(f"Scaling, scripted LLM {report['latency_s']} s/call (dotted: linear)")
    ax.legend()
    ax.grid(alpha=0.3)
    save(fig, path, dpi=110)


def run(args: argparse.Namespace) -> dict[str, Any]:
    points = plan(args)
    tmp = Path(tempfile.mkdtemp(prefix="parley-scaling-"))
    stack = ScalingStack(tmp, args)
    rows = []
    try:
        for n, point in enumerate(points):
            items = args.items_per_unit * point.k
            row = run_point(stack, point, items, f"p{n}")
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        stack.stop()
    efficiency(rows)
    return {
        "latency_s": args.latency,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "local_counts": args.local_counts,
        "points": rows,
        "logs": str(tmp),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--series", default="workers,replicas,both", help="workers, replicas, both")
    parser.add_argument("--ks", default="1,2,4", help="the values of k")
    parser.add_argument("--latency", type=float, default=0.25, help="scripted LLM seconds per call")
    parser.add_argument(
        "--capacity", type=int, default=4, help="requests a replica serves at once (workers, both)"
    )
    parser.add_argument(
        "--replica-capacity", type=int, default=1, help="requests a replica serves at once (replicas series)"
    )
    parser.add_argument(
        "--per-node-saturate", type=int, default=3, help="debates per worker node in the replicas series"
    )
    parser.add_argument(
        "--local-counts",
        action="store_true",
        help="worker processes do not share their calls in flight per replica (each sees its own)",
    )
    parser.add_argument("--items-per-unit", type=int, default=16, help="debates per point = this x k")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "scaling")
    args = parser.parse_args(argv)
    report = run(args)
    report["command"] = command_line("bench.scaling", argv)
    write_json(args.out / "scaling.json", report)
    print(write_markdown(args.out / "scaling.md", markdown(report)))
    plot(report, args.out / "scaling.png")
    return report


if __name__ == "__main__":
    main()

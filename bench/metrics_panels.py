"""The dashboard's key panels from a real Prometheus scrape of a batch run, rendered as one PNG.

Set-up (real processes on loopback): redis-server, the API (uvicorn in a thread), a Celery worker with
W prefork processes serving ``/metrics`` on its own port, the scripted OpenAI-compatible LLM with a
fixed latency (every other question makes the judge disagree, so those debates run all their rounds),
and Debian's ``prometheus`` binary scraping the gateway and the worker every second. A batch of N
questions runs through; then the panels' PromQL — taken from the Grafana dashboard in
``deploy/grafana/dashboards/parley.json``, so the picture is what operators will see — is evaluated
with Prometheus's ``query_range`` API and drawn: queue depth, debate time p50/p95, tokens by role.

Run: ``.venv/bin/python -m bench.metrics_panels --items 80 --workers 4 --latency 0.15``. Writes
``reports/observability/panels.png`` and ``panels.json`` (totals and the run's settings).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from api.settings import ApiSettings
from bench.harness.plots import pyplot
from parley_testing.processes import ROOT, ApiServer, RedisServer, WorkerProcess, worker_env
from parley_testing.scripted_llm import JUDGE, ScriptedLLM, free_port

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "parley.json"
OUT = ROOT / "reports" / "observability"
PANELS = ("Queue depth", "Debate time p50 / p95", "Tokens by role")
CONFIG = {"knowledge": "none", "rounds": 3}


def panel_queries(rate_window: str) -> dict[str, list[tuple[str, str]]]:
    """(expr, legend) per key panel, as the dashboard has them, with Grafana's rate interval filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    by_title = {p["title"]: p for p in dashboard["panels"]}
    return {
        title: [
            (t["expr"].replace("$__rate_interval", rate_window), t["legendFormat"])
            for t in by_title[title]["targets"]
        ]
        for title in PANELS
    }


def script(llm: ScriptedLLM) -> None:
    """Debaters answer with the question's number; the judge agrees only on even numbers."""

    def judge(body: dict[str, Any]) -> str:
        text = json.dumps(body)
        number = int(text.split("question number ")[1].split("?")[0])
        return "They agree. [Yes]" if number % 2 == 0 else "They disagree. [No]"

    llm.on(JUDGE, judge)
    llm.on("summarize the final answer", "The final answer is [42].")
    llm.on("Question:", "The answer is [42].")


def start_prometheus(workdir: Path, targets: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit(
            "prometheus is not installed (apt-get install -y --no-install-recommends prometheus)"
        )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": name, "static_configs": [{"targets": [target]}]} for name, target in targets.items()
        ],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    log = (workdir / "prometheus.log").open("ab")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"prometheus did not start; see {workdir / 'prometheus.log'}")
        time.sleep(0.2)


def query_range(prom: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{prom}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": "1s"},
        timeout=30,
    )
    resp.raise_for_status()
    result: list[dict[str, Any]] = resp.json()["data"]["result"]
    return result


def instant(prom: str, expr: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=30)
    resp.raise_for_status()
    result: list[dict[str, Any]] = resp.json()["data"]["result"]
    return result


def legend(template: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def render(series: dict[str, list[tuple[str, list[tuple[float, float]]]]], t0: float, path: Path) -> None:
    plt = pyplot()
    units = {"Queue depth": "messages", "Debate time p50 / p95": "seconds", "Tokens by role": "tokens / s"}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for ax, title in zip(axes, PANELS, strict=True):
        lines = series[title]
        if title == "Tokens by role" and lines:
            xs = [t - t0 for t, _ in lines[0][1]]
            ax.stackplot(
                xs,
                *[[0.0 if math.isnan(v) else v for _, v in points] for _, points in lines],
                labels=[name for name, _ in lines],
                alpha=0.8,
            )
        else:
            for name, points in lines:
                ax.plot([t - t0 for t, _ in points], [v for _, v in points], label=name)
        ax.set_title(title)
        ax.set_xlabel("seconds since the batch was submitted")
        ax.set_ylabel(units[title])
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=8, loc="upper right")
    fig.suptitle("Parley: a batch through gateway, Celery worker and scripted LLM, scraped by Prometheus")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def aligned(result: list[dict[str, Any]], start: float, end: float) -> list[tuple[float, float]]:
    """One series on the full 1 s grid; seconds without a value (no debate finished yet) are NaN, so
    the line starts where the data does instead of dropping to zero."""
    values = {round(float(t)): float(v) for t, v in result[0]["values"]} if result else {}
    return [(float(t), values.get(t, math.nan)) for t in range(round(start), round(end) + 1)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="parley-metrics-bench-"))
    redis = RedisServer(tmp / "redis").start()
    prom: subprocess.Popen[bytes] | None = None
    worker: WorkerProcess | None = None
    try:
        with (
            ScriptedLLM(latency_s=args.latency, capacity=args.capacity) as llm,
            ApiServer(ApiSettings(redis_url=redis.url, rate_limit_per_minute=1_000_000)) as api,
        ):
            script(llm)
            metrics_port = free_port()
            env = worker_env(
                redis.url,
                llm.base_url,
                PARLEY_WORKER_METRICS_PORT=str(metrics_port),
                PARLEY_WORKER_METRICS_HOST="127.0.0.1",
                PARLEY_WORKER_METRICS_DIR=str(tmp / "worker-metrics"),
                PARLEY_LLM_MAX_CONCURRENCY=str(args.capacity),
            )
            worker = WorkerProcess(env, tmp / "worker.log", concurrency=args.workers).start()
            prom_port = free_port()
            gateway = api.url.removeprefix("http://").rstrip("/")
            prom = start_prometheus(
                tmp, {"parley-api": gateway, "parley-worker": f"127.0.0.1:{metrics_port}"}, prom_port
            )
            base = f"http://127.0.0.1:{prom_port}"
            # Prometheus applies new targets a few seconds after it starts; wait until both answer,
            # then record a few seconds of the idle system.
            deadline = time.monotonic() + 60
            while not (r := instant(base, "count(up == 1)")) or float(r[0]["value"][1]) < 2:
                if time.monotonic() > deadline:
                    raise SystemExit("prometheus could not scrape the gateway and the worker")
                time.sleep(0.5)
            time.sleep(3)

            items = [{"id": f"q{i}", "question": f"What is question number {i}?"} for i in range(args.items)]
            t0 = time.time()
            with httpx.Client(base_url=api.url, timeout=60) as client:
                accepted = client.post("/v1/batches", json={"items": items, "config": CONFIG})
                assert accepted.status_code == 202, accepted.text
                batch_id = accepted.json()["batch_id"]
                while client.get(f"/v1/batches/{batch_id}").json()["status"] != "completed":
                    time.sleep(0.5)
                counts = client.get(f"/v1/batches/{batch_id}").json()["counts"]
            t_done = time.time()
            time.sleep(args.tail_s)  # the last scrapes and rate windows
            end = time.time()
            start = t0 - 3

            series: dict[str, list[tuple[str, list[tuple[float, float]]]]] = {}
            for title, queries in panel_queries(f"{args.rate_window_s}s").items():
                series[title] = []
                for expr, template in queries:
                    for result in query_range(base, expr, start, end):
                        name = legend(template, result["metric"])
                        series[title].append((name, aligned([result], start, end)))
            out = Path(args.out)
            render(series, t0, out / "panels.png")

            def total(expr: str) -> dict[str, float]:
                return {
                    json.dumps(r["metric"], sort_keys=True): round(float(r["value"][1]), 3)
                    for r in instant(base, expr)
                }

            report = {
                "items": args.items,
                "workers": args.workers,
                "llm_latency_s": args.latency,
                "llm_capacity": args.capacity,
                "batch_counts": counts,
                "batch_wall_s": round(t_done - t0, 1),
                "scrape_interval_s": 1,
                "rate_window_s": args.rate_window_s,
                "max_queue_depth": max(
                    (v for _, points in series["Queue depth"] for _, v in points if not math.isnan(v)),
                    default=0.0,
                ),
                "jobs_total": total("sum by (status) (parley_jobs_total)"),
                "debate_seconds_p50_p95_whole_run": [
                    round(
                        float(
                            instant(
                                base,
                                f"histogram_quantile({q}, sum by (le) "
                                '(parley_job_duration_seconds_bucket{status="completed"}))',
                            )[0]["value"][1]
                        ),
                        2,
                    )
                    for q in (0.5, 0.95)
                ],
                "tokens_by_role": total('sum by (role) (parley_llm_tokens_total{kind=~"prompt|completion"})'),
                "rounds_mean": total("sum(parley_debate_rounds_sum) / sum(parley_debate_rounds_count)"),
                "panel_queries": {
                    t: [q for q, _ in qs] for t, qs in panel_queries(f"{args.rate_window_s}s").items()
                },
            }
            (out / "panels.json").write_text(json.dumps(report, indent=2) + "\n")
            return report
    finally:
        if worker is not None:
            worker.stop()
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=10)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=80, help="questions in the batch")
    parser.add_argument("--workers", type=int, default=4, help="Celery prefork processes")
    parser.add_argument("--latency", type=float, default=0.15, help="scripted LLM seconds per call")
    parser.add_argument("--capacity", type=int, default=4, help="concurrent requests the LLM serves")
    parser.add_argument("--rate-window-s", type=int, default=10, help="PromQL rate window")
    parser.add_argument("--tail-s", type=float, default=8.0, help="seconds scraped after the batch ended")
    parser.add_argument("--out", default=str(OUT), help="output folder")
    report = run(parser.parse_args())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Batch throughput on one machine: questions per hour at several worker / server-slot settings.

The same batch of questions (the first ``--questions`` of ``--dataset``, 100 of the repository's NQ-open
dev set by default, each with its precomputed knowledge pool from ``--pools`` so every setting debates
over the same knowledge) goes through the real service, as ``parley up`` runs it: a private
redis-server, the gateway (``parley api``), one Celery worker (``parley worker``) with W pool
processes, and the embedded model served on its own (``parley llm serve``) with S KV-cache slots. Per
setting ``WxS`` the server is started afresh, the batch is posted in one request, and the run ends
when its last debate has finished.

How many requests reach the server at once: W debates run side by side and each worker process
keeps at most ``max(2, S // W)`` calls in flight (``PARLEY_LLM_MAX_CONCURRENCY``), so W x that is about
S: llama.cpp's server decodes the requests of all busy slots together (continuous batching), picks
for each request the idle slot whose cached prompt shares the longest prefix with it, and keeps
prompts evicted from a slot in a host-memory cache (``--cache-ram``) to restore them later; more
slots keep more of the debates' prompt families (the selection, each agent, the panel) cached.

Reported per setting and server build (``--servers``: ``xllamacpp``, the prebuilt wheel; ``native``,
llama-server from ``make native-llm``, when built): questions per hour, prompt / evaluated / cached /
completion tokens per second, the CPU the server and the worker used (cores), the machine's CPU use,
failures, and contains-accuracy with its bootstrap 95% CI (``evaluation.metrics.paired_bootstrap``),
plus the paired CI of its difference to the first setting, so a faster setting cannot silently be a
worse one. Writes ``throughput.json``, ``throughput.md`` and ``throughput.png`` to ``--out`` after each
setting, so a run stopped part-way keeps the settings it finished; ``--resume`` keeps those rows (when
the report measured the same questions, config and model) and runs only the settings it lacks, and
the table marks the rows kept from an earlier run, which were not measured side by side.

Full measurement (hours on a small CPU):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.throughput --questions 100 --settings 2x4,2x8,4x8,4x16 \\
        --servers xllamacpp,native --out reports/throughput

``--llm-url`` runs against a server you started (any OpenAI-compatible one; ``S`` is then only what
the worker assumes, and ``--servers`` is ignored); ``--llm-url compiled=URL1,prebuilt=URL2`` runs the
same settings against each labelled server in turn, side by side in one report (the ``llm`` image
with its compiled server and with ``PARLEY_LLM_EMBEDDED_SERVER=xllamacpp``, say). The CPU of a server
started elsewhere is not measured (``-``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.batches import job_times, run_batch
from bench.harness.cli import study_parser
from bench.harness.plots import figure, save
from bench.harness.processes import exit_on_sigterm, start_process, wait_http
from bench.harness.procfs import group_cpu_s, machine_busy
from bench.harness.reports import (
    command_line,
    report_head,
    table_head,
    utc_iso,
    write_json,
    write_markdown,
)
from bench.harness.stack import GatewayStack
from evaluation.metrics import contains_match, paired_bootstrap
from parley_testing.processes import ROOT, WorkerProcess, worker_env
from parley_testing.scripted_llm import free_port
from services.processes import stop_process

DATASET = ROOT / "data" / "nq_open_vital_dev.jsonl"
POOLS = ROOT / "reports" / "nq100-0.5b" / "pools.jsonl"
SERVERS = {"xllamacpp": "xllamacpp", "native": "llama-server"}
# The embedded default's debate: MADKE with the robust prompts and judge=both.
CONFIG: dict[str, Any] = {"protocol": "madke", "prompt_style": "robust", "judge": "both"}


@dataclass(frozen=True)
class Setting:
    workers: int  # debates at once: the worker's pool processes
    slots: int  # the server's KV-cache slots (requests decoded together)

    @property
    def per_process(self) -> int:
        """Calls in flight per worker process: W of them together fill about the S slots."""
        return max(2, self.slots // self.workers)

    @property
    def name(self) -> str:
        return f"{self.workers}x{self.slots}"


def parse_settings(text: str) -> list[Setting]:
    settings = []
    for part in text.split(","):
        w, _, s = part.strip().partition("x")
        settings.append(Setting(int(w), int(s)))
    return settings


def load_items(dataset: Path, pools: Path | None, questions: int) -> list[dict[str, Any]]:
    """The first ``questions`` items, each with its pool's items when ``pools`` has one."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    if pools is not None and pools.is_file():
        for line in pools.read_text().splitlines():
            row = json.loads(line)
            by_id[row["id"]] = [
                {k: it[k] for k in ("source", "title", "text", "url", "score") if it.get(k) is not None}
                for it in row["pool"]["items"]
            ]
    items = []
    for line in dataset.read_text().splitlines()[:questions]:
        row = json.loads(line)
        item = {"id": row["id"], "question": row["question"], "answers": row["answers"]}
        if row["id"] in by_id:
            item["pool"] = by_id[row["id"]]
        items.append(item)
    return items


def gateway_stack(tmp: Path) -> GatewayStack:
    """Redis and the gateway, shared by every setting; the LLM server and the worker change."""
    stack = GatewayStack(tmp)
    stack.start({"PARLEY_API_METRICS_PORT": "0"})
    return stack


def start_llm(
    stack: GatewayStack, args: argparse.Namespace, server: str, setting: Setting
) -> tuple[subprocess.Popen[bytes], str]:
    """``parley llm serve`` with the setting's slots on a free port, once it answers: the process
    and its OpenAI-compatible URL."""
    port = free_port()
    env = {**stack.env, "PARLEY_LLM_EMBEDDED_SLOTS": str(setting.slots)}
    env["PARLEY_LLM_EMBEDDED_SERVER"] = SERVERS[server]
    if args.model:
        env["PARLEY_LLM_EMBEDDED_MODEL"] = args.model
    if args.threads:
        env["PARLEY_LLM_EMBEDDED_THREADS"] = str(args.threads)
    argv = [sys.executable, "-m", "parley_cli", "llm", "serve", "--host", "127.0.0.1", "--port", str(port)]
    log = stack.tmp / f"llm-{server}-{setting.name}.log"
    proc = start_process(argv, env, log)
    wait_http(f"http://127.0.0.1:{port}/health", 600, proc=proc, log=log, interval_s=0.5)
    return proc, f"http://127.0.0.1:{port}/v1"


def isolated_prompt_rate(url: str, model: str) -> float:
    """The server's prompt evaluation rate on its own, just before the batch (no cache, one request:
    ``bench.embedded_speed.throughput``), so the build's speed shows apart from what the batch adds:
    decoding, cache hits, debates of other lengths."""
    from bench.embedded_speed import throughput as prompt_rate
    from services.llm import LLMSettings, ServedModel, build_role_models

    async def measure() -> float:
        models = build_role_models(LLMSettings(), served=ServedModel(url, model, structured_output="off"))
        return float((await prompt_rate(models))["prompt_tokens_per_s"])

    return asyncio.run(measure())


def llm_urls(spec: str | None) -> dict[str, str]:
    """``--llm-url``: one URL (labelled ``external``) or ``LABEL=URL,...``, in order."""
    if not spec:
        return {}
    if "=" not in spec:
        return {"external": spec}
    urls: dict[str, str] = {}
    for part in spec.split(","):
        label, sep, url = part.partition("=")
        if not sep or not label.strip() or not url.strip().startswith(("http://", "https://")):
            raise ValueError(f"--llm-url: {part!r} is not LABEL=http(s)://URL")
        if label.strip() in urls:
            raise ValueError(f"--llm-url: the label {label.strip()!r} is given twice")
        urls[label.strip()] = url.strip()
    return urls


def run_setting(
    stack: GatewayStack, args: argparse.Namespace, server: str, setting: Setting, items: list[dict[str, Any]]
) -> dict[str, Any]:
    external = llm_urls(args.llm_url)
    llm: subprocess.Popen[bytes] | None = None
    if external:
        url = external[server]
    else:
        llm, url = start_llm(stack, args, server, setting)
    env = worker_env(
        stack.redis.url,
        url,
        PARLEY_LLM_MODEL=args.model or "local",
        PARLEY_LLM_STRUCTURED_OUTPUT=args.structured_output,
        PARLEY_LLM_MAX_CONCURRENCY=str(setting.per_process),
        PARLEY_LLM_MAX_ATTEMPTS="100",
        PARLEY_LLM_TIMEOUT_S=str(args.timeout_s),
        PARLEY_WORKER_WORKER_MAX_TASKS_PER_CHILD="100000",
        PARLEY_WORKER_TASK_SOFT_TIME_LIMIT=str(args.timeout_s * 20),
        PARLEY_WORKER_TASK_TIME_LIMIT=str(args.timeout_s * 20 + 60),
        PARLEY_WORKER_VISIBILITY_TIMEOUT=str(args.timeout_s * 20 + 600),
    )
    tag = f"{server}-{setting.name}"
    worker = WorkerProcess(env, stack.tmp / f"worker-{tag}.log", concurrency=setting.workers, name=tag)
    try:
        worker.start(timeout_s=120)
        time.sleep(1.0)
        assert worker.proc is not None
        alone = isolated_prompt_rate(url, args.model or "local")
        cpu0 = (group_cpu_s(llm.pid) if llm else 0.0, group_cpu_s(worker.proc.pid), machine_busy())
        batch = [{**it, "id": f"{tag}-{it['id']}"} for it in items]
        t0, rows = run_batch(stack.api_url, batch, args.config, poll_s=1.0)
        cpu1 = (group_cpu_s(llm.pid) if llm else 0.0, group_cpu_s(worker.proc.pid), machine_busy())
        wall = max(job_times(stack.redis, rows)) - t0
    finally:
        worker.stop()
        stop_process(llm, 30)
    gold = {it["id"]: it["answers"] for it in batch}
    per_item = []
    for row in rows:
        result = row.get("result") or {}
        usage = result.get("usage") or {}
        ok = row["status"] == "completed"
        per_item.append(
            {
                "id": row.get("id") or row.get("item_id"),
                "status": row["status"],
                "answer": result.get("answer"),
                "contains": contains_match(result.get("answer"), gold.get(row.get("id") or "", []))
                if ok
                else 0.0,
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "cached_tokens": usage.get("cached_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "calls": usage.get("calls", 0),
            }
        )
    busy = cpu1[2][0] - cpu0[2][0]
    total = cpu1[2][1] - cpu0[2][1]
    done = [p for p in per_item if p["status"] == "completed"]
    acc = [p["contains"] for p in per_item]
    ci = paired_bootstrap([0.0] * len(acc), acc)
    prompt = sum(p["prompt_tokens"] for p in per_item)
    cached = sum(p["cached_tokens"] for p in per_item)
    completion = sum(p["completion_tokens"] for p in per_item)
    return {
        "server": server,
        "setting": setting.name,
        "measured_at": utc_iso(t0),
        "worker_processes": setting.workers,
        "slots": setting.slots,
        "calls_in_flight_per_process": setting.per_process,
        "questions": len(items),
        "completed": len(done),
        "wall_s": round(wall, 1),
        "questions_per_hour": round(len(done) / wall * 3600, 1),
        "seconds_per_question": round(wall / max(1, len(done)), 1),
        "isolated_prompt_tokens_per_s": alone,
        "prompt_tokens_per_s": round(prompt / wall, 1),
        "evaluated_prompt_tokens_per_s": round((prompt - cached) / wall, 1),
        "cached_share": round(cached / prompt, 3) if prompt else 0.0,
        "completion_tokens_per_s": round(completion / wall, 2),
        "calls_per_question": round(sum(p["calls"] for p in done) / max(1, len(done)), 1),
        "server_cores": round((cpu1[0] - cpu0[0]) / wall, 2) if llm else None,
        "worker_cores": round((cpu1[1] - cpu0[1]) / wall, 2),
        "machine_cpu_use": round(busy / total, 3) if total else None,
        "accuracy_contains": round(ci.diff, 3),
        "accuracy_ci95": [round(ci.low, 3), round(ci.high, 3)],
        "items": per_item,
    }


def compare(rows: list[dict[str, Any]]) -> None:
    """Each row's speed-up and paired accuracy difference against the first row (same questions)."""
    base = rows[0]
    for row in rows:
        row["speedup_vs_first"] = round(row["questions_per_hour"] / base["questions_per_hour"], 2)
        a = {p["id"].split("-", 2)[-1]: p["contains"] for p in base["items"]}
        b = {p["id"].split("-", 2)[-1]: p["contains"] for p in row["items"]}
        common = sorted(set(a) & set(b))
        ci = paired_bootstrap([a[k] for k in common], [b[k] for k in common])
        row["accuracy_diff_vs_first"] = {
            "diff": round(ci.diff, 3),
            "ci95": [round(ci.low, 3), round(ci.high, 3)],
            "significant": ci.significant,
        }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        *report_head(
            "Batch throughput on one machine",
            f"{report['questions']} questions of `{report['dataset']}`, config "
            f"`{json.dumps(report['config'])}`, model {report['model']}; {report['cpu_count']} CPUs "
            f"({report['machine']}). Command: `{report['command']}`",
        ),
        *table_head(
            "server",
            "W x S",
            "in flight / process",
            "done",
            "wall s",
            "questions/h",
            "× first",
            "prompt tok/s alone",
            "prompt tok/s (evaluated, cached %)",
            "completion tok/s",
            "server / worker cores",
            "CPU use",
            "accuracy (95% CI)",
            "Δ accuracy vs first (95% CI)",
            "measured (UTC)",
        ),
    ]
    for r in report["rows"]:
        d = r["accuracy_diff_vs_first"]
        server_cores = "-" if r["server_cores"] is None else r["server_cores"]
        lines.append(
            f"| {r['server']} | {r['setting']} | {r['calls_in_flight_per_process']} | "
            f"{r['completed']}/{r['questions']} | {r['wall_s']} | {r['questions_per_hour']} | "
            f"{r['speedup_vs_first']} | {r.get('isolated_prompt_tokens_per_s', '-')} | "
            f"{r['prompt_tokens_per_s']} ({r['evaluated_prompt_tokens_per_s']}, "
            f"{100 * r['cached_share']:.0f} %) | {r['completion_tokens_per_s']} | "
            f"{server_cores} / {r['worker_cores']} | {100 * (r['machine_cpu_use'] or 0):.0f} % | "
            f"{r['accuracy_contains']:.3f} [{r['accuracy_ci95'][0]:.3f}, {r['accuracy_ci95'][1]:.3f}] | "
            f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] | {r.get('measured_at', '-')} |"
        )
    started = report.get("started_at")
    resumed = [
        f"{r['server']} {r['setting']}"
        for r in report["rows"]
        if started and r.get("measured_at", started) < started
    ]
    if resumed:
        lines += [
            "",
            f"Kept from an earlier run (`--resume`): {', '.join(resumed)}. Those rows were not measured side "
            "by side with the others, so the machine's other load may differ between them; their × first "
            "is a comparison across runs.",
        ]
    lines += [
        "",
        "W x S: W worker processes (debates at once) and S server slots. Prompt tok/s alone: the server's "
        "prompt evaluation rate measured on its own just before the batch (no cache). Accuracy: "
        "contains-match; CIs by bootstrap over the questions (paired for the difference).",
    ]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    rows = report["rows"]
    labels = [f"{r['server']}\n{r['setting']}" for r in rows]
    fig, ax = figure((max(5.0, 1.3 * len(rows)), 3.8))
    ax.bar(labels, [r["questions_per_hour"] for r in rows], color="#4c72b0")
    ax.set_ylabel("questions per hour")
    ax.set_title("Batch throughput by worker processes x server slots")
    for i, r in enumerate(rows):
        ax.annotate(
            f"acc {r['accuracy_contains']:.2f}", (i, r["questions_per_hour"]), ha="center", va="bottom"
        )
    save(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--pools", type=Path, default=POOLS, help="precomputed pools by item id (JSONL)")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--settings", default="2x4,2x8,4x8,4x16", help="WxS: worker processes x server slots")
    parser.add_argument(
        "--servers", default="xllamacpp,native", help="xllamacpp, native (skipped if not built)"
    )
    parser.add_argument(
        "--model", default=None, help="PARLEY_LLM_EMBEDDED_MODEL (default: the embedded default)"
    )
    parser.add_argument("--threads", type=int, default=None, help="server threads (default: all cores)")
    parser.add_argument("--config", type=json.loads, default=CONFIG, help="the debate config (JSON)")
    parser.add_argument("--structured-output", default="json_schema")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="read timeout per LLM call")
    parser.add_argument(
        "--llm-url",
        default=None,
        help="an OpenAI-compatible server to use instead, or LABEL=URL,... to compare several",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "throughput")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows of --out's report (same questions, config and model) and run only the others",
    )
    args = parser.parse_args(argv)
    from services.llm import find_llama_server

    servers = [s for s in args.servers.split(",") if s]
    skipped = [s for s in servers if s == "native" and find_llama_server() is None]
    try:
        external = llm_urls(args.llm_url)
    except ValueError as e:
        parser.error(str(e))
    servers = list(external) if external else [s for s in servers if s not in skipped]
    items = load_items(args.dataset, args.pools, args.questions)
    tmp = Path(tempfile.mkdtemp(prefix="parley-throughput-"))
    report = {
        "dataset": str(args.dataset.relative_to(ROOT) if args.dataset.is_relative_to(ROOT) else args.dataset),
        "questions": len(items),
        "with_pools": sum("pool" in it for it in items),
        "config": args.config,
        "model": args.model or "the embedded default",
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "skipped_servers": {s: "not built (make native-llm)" for s in skipped},
        "command": command_line("bench.throughput", argv),
        "logs": str(tmp),
        "started_at": utc_iso(time.time()),
    }
    try:
        kept = resumed_rows(args.out / "throughput.json", report) if args.resume else {}
    except ValueError as e:
        parser.error(str(e))
    wanted = [(server, setting) for server in servers for setting in parse_settings(args.settings)]
    rows: list[dict[str, Any]] = []
    stack: GatewayStack | None = None
    # A run of hours is stopped with SIGTERM as often as with Ctrl-C: both unwind through the finally
    # blocks, so the server, worker, gateway and redis of the setting in progress are stopped too.
    exit_on_sigterm()
    try:
        for server, setting in wanted:
            row = kept.get((server, setting.name))
            if row is None:
                stack = stack or gateway_stack(tmp)
                row = run_setting(stack, args, server, setting, items)
                print(json.dumps({k: v for k, v in row.items() if k != "items"}), flush=True)
            rows.append(row)
            # Each setting takes up to hours on a CPU: the report so far is on disk as soon as it ends,
            # so an interrupted run keeps what it measured and ``--resume`` goes on from there.
            write_report(report, rows, args.out)
    finally:
        if stack is not None:
            stack.stop()
    print(markdown(report))
    return report


def resumed_rows(path: Path, report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of an earlier report at ``path`` by (server, setting), if it measured the same batch."""
    if not path.is_file():
        return {}
    earlier = json.loads(path.read_text())
    for key in ("dataset", "questions", "with_pools", "config", "model"):
        if earlier.get(key) != report[key]:
            raise ValueError(
                f"--resume: {path} measured {key} {earlier.get(key)!r}, this run {report[key]!r}; "
                "use another --out"
            )
    return {(r["server"], r["setting"]): r for r in earlier.get("rows", [])}


def write_report(report: dict[str, Any], rows: list[dict[str, Any]], out: Path) -> None:
    compare(rows)
    report["rows"] = rows
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "throughput.json", report)
    write_markdown(out / "throughput.md", markdown(report))
    plot(report, out / "throughput.png")


if __name__ == "__main__":
    main()

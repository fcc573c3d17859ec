"""Gateway throughput benchmark: a 500-debate batch through the API, Redis, Celery and a scripted LLM.

Set-up (all real processes on loopback): a private redis-server; the scripted OpenAI-compatible server
in its own process with a fixed ``--latency`` and a ``--capacity`` of C concurrent requests (like a
llama.cpp server with C slots); the API (``parley api``); one Celery worker with W prefork processes
(``parley worker --concurrency W``).

Reported:
* time to accept the batch (POST → 202);
* debates per minute from the POST until the last item finished, and the ratio to the backend's
  theoretical capacity ``60 · C / (latency · calls per debate)`` debates per minute (target ≥ 0.9);
* how long a single debate submitted in the middle of the batch waited (the fairness check);
* p50/p95 of ``GET /v1/debates/{id}`` under 50 concurrent clients.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python -m bench.gateway_bench --items 500 --latency 0.25 --capacity 4
--workers 8``. Results go to ``reports/gateway/bench.json`` (and are printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness.batches import batch_results, job_times, post_batch
from bench.harness.cli import study_parser
from bench.harness.processes import start_scripted_llm
from bench.harness.reports import command_line, write_json
from bench.harness.stack import GatewayStack
from bench.harness.stats import percentile
from parley_testing.processes import ROOT, WorkerProcess, worker_env

CONFIG = {"knowledge": "none", "rounds": 3}  # the judge agrees: 2 debaters + judge + summary = 4 calls


async def _raw_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    """One keep-alive HTTP/1.1 GET on an open connection; returns the status code."""
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def poll_latencies(port: int, job_ids: list[str], clients: int, per_client: int) -> list[float]:
    """``clients`` concurrent keep-alive connections, each issuing ``per_client`` GETs of random jobs.

    A minimal HTTP/1.1 client on asyncio streams: httpx's client costs ~1 ms of CPU per request, which
    on a 2-core machine made the load generator, not the API, the bottleneck (measured: the client
    used 93 % of a core while the API used 23 %).
    """
    latencies: list[float] = []

    async def one_client(seed: int) -> None:
        rng = random.Random(seed)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(per_client):
                path = f"/v1/debates/{rng.choice(job_ids)}"
                request = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
                t0 = time.perf_counter()
                status = await _raw_get(reader, writer, request)
                latencies.append((time.perf_counter() - t0) * 1000)
                assert status == 200, status
        finally:
            writer.close()

    await asyncio.gather(*(one_client(i) for i in range(clients)))
    return latencies


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="parley-gw-bench-"))
    stack = GatewayStack(tmp)
    worker: WorkerProcess | None = None
    try:
        stack.redis.start()
        llm = start_scripted_llm(stack.env, tmp / "llm.log", latency_s=args.latency, capacity=args.capacity)
        stack.procs.append(llm.proc)
        stack.start_gateway(api_workers=args.api_workers)
        base = stack.api_url

        if args.accept_only:
            # Intake alone (no worker): how long the largest allowed batch takes to validate, store
            # and queue, and how long its results stream takes to read.
            items = [{"id": f"a{i}", "question": f"Question number {i}?"} for i in range(args.items)]
            with httpx.Client(base_url=base, timeout=600) as client:
                t0 = time.perf_counter()
                batch_id = post_batch(client, items, CONFIG)
                accept = time.perf_counter() - t0
                t1 = time.perf_counter()
                lines = client.get(f"/v1/batches/{batch_id}/results").text.count("\n")
                results = time.perf_counter() - t1
            return {"items": args.items, "time_to_accept_s": round(accept, 3),
                    "results_stream_s": round(results, 3), "result_lines": lines}  # fmt: skip

        env = worker_env(
            stack.redis.url,
            f"{llm.url}/v1",
            PARLEY_LLM_MAX_CONCURRENCY=str(args.capacity),
            PARLEY_WORKER_WORKER_MAX_TASKS_PER_CHILD="100000",
        )
        worker = WorkerProcess(env, tmp / "worker.log", concurrency=args.workers, pool="prefork")
        worker.start()
        time.sleep(1.0)  # let every pool process connect

        items = [
            {"id": f"b{i}", "question": f"What is the capital of country number {i}?"}
            for i in range(args.items)
        ]
        with httpx.Client(base_url=base, timeout=120) as client:
            t0 = time.perf_counter()
            batch_id = post_batch(client, items, CONFIG)
            t_accept = time.perf_counter() - t0

            # Fairness: a single debate submitted while the batch is queued.
            time.sleep(args.single_after_s)
            t_single = time.perf_counter()
            single_id = client.post("/v1/debates", json={"question": "Single?", "config": CONFIG}).json()[
                "job_id"
            ]
            single_wait = None
            status: dict[str, Any] = {}
            while True:
                if single_wait is None:
                    job = client.get(f"/v1/debates/{single_id}").json()
                    if job["status"] == "completed":
                        single_wait = time.perf_counter() - t_single
                status = client.get(f"/v1/batches/{batch_id}").json()
                if status["status"] == "completed" and single_wait is not None:
                    break
                time.sleep(0.25)
            # The end of the batch is when its last item finished (from the job records).
            rows = batch_results(client, batch_id)
        completed = [r for r in rows if r["status"] == "completed"]
        calls = sum(r["result"]["usage"]["calls"] for r in completed)
        created = job_times(stack.redis, rows[:1], "created_at")[0]
        wall = max(job_times(stack.redis, rows)) - created + t_accept  # from the POST to the last result
        per_minute = len(completed) / wall * 60
        calls_per_debate = calls / max(1, len(completed))
        theoretical = 60 * args.capacity / (args.latency * calls_per_debate)

        job_ids = [row["job_id"] for row in rows]
        t_get = time.perf_counter()
        assert stack.gateway is not None
        lat = asyncio.run(poll_latencies(stack.gateway.port, job_ids, args.clients, args.requests_per_client))
        get_rps = len(lat) / (time.perf_counter() - t_get)
        report = {
            "items": args.items,
            "completed": len(completed),
            "llm_latency_s": args.latency,
            "llm_capacity": args.capacity,
            "worker_processes": args.workers,
            "time_to_accept_s": round(t_accept, 3),
            "wall_s": round(wall, 2),
            "debates_per_minute": round(per_minute, 1),
            "llm_calls_per_debate": round(calls_per_debate, 2),
            "theoretical_debates_per_minute": round(theoretical, 1),
            "ratio_to_capacity": round(per_minute / theoretical, 3),
            "single_debate_wait_s": round(single_wait or -1, 2),
            "single_debate_min_s": round(3 * args.latency, 2),
            "get_clients": args.clients,
            "get_requests": len(lat),
            "get_p50_ms": round(statistics.median(lat), 1),
            "get_p95_ms": round(percentile(lat, 95), 1),
            "get_max_ms": round(max(lat), 1),
            "get_throughput_rps": round(get_rps, 1),
            "api_processes": args.api_workers,
            "cpu_count": os.cpu_count(),
        }
        return report
    finally:
        if worker is not None:
            worker.stop()
        stack.stop()


def main() -> None:
    parser = study_parser(__doc__)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.25, help="scripted LLM seconds per call")
    parser.add_argument("--capacity", type=int, default=4, help="concurrent requests the LLM serves (C)")
    parser.add_argument("--workers", type=int, default=8, help="worker processes (W)")
    parser.add_argument("--clients", type=int, default=50, help="concurrent GET clients")
    parser.add_argument("--accept-only", action="store_true", help="only time the intake of --items")
    parser.add_argument("--api-workers", type=int, default=1, help="uvicorn processes of the API")
    parser.add_argument("--requests-per-client", type=int, default=40)
    parser.add_argument("--single-after-s", type=float, default=5.0, help="submit the single debate after")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "gateway" / "bench.json")
    args = parser.parse_args()
    report = run(args)
    report["command"] = command_line("bench.gateway_bench")
    write_json(args.out, report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

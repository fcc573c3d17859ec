"""Schemathesis from the outside, with every check, against a live stack: the gateway's OpenAPI
document must say exactly what the API accepts and answers.

Starts a private redis-server, a Celery worker process answering from the scripted LLM, and the
gateway under uvicorn (one key, an operator endpoint named ``small``, small per-job budgets so every
accepted debate ends within a second), then runs the schemathesis command line (``st run``, a process
of its own that knows only the URL) with every check on every operation (``bench/schemathesis.toml``)
and prints its summary. The exit status is schemathesis's: 0 when no check failed.

    .venv/bin/python bench/fuzz_live.py                       # 100 examples per operation
    .venv/bin/python bench/fuzz_live.py --max-examples 20 --seed 7
    .venv/bin/python bench/fuzz_live.py --serve               # only start the stack and wait (Ctrl-C)

docs/fuzzing.md records the command and its last summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script (``python bench/<this file>``, as its committed report and docs write it), Python
# puts bench/ on the path, not the repository: add the repository so the harness and the test helpers
# import as they do under ``python -m bench.<this module>``.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from typing import Any

from api.guards import hash_key
from api.settings import ApiSettings
from parley_testing.processes import ROOT, ApiServer, RedisServer, WorkerProcess, worker_env
from parley_testing.scripted_llm import JUDGE, SELECT, SUMMARY, ClosedPort, ScriptedLLM

KEY = "fuzz-secret-key"
CONFIG = Path(__file__).with_name("schemathesis.toml")


def stack_settings(redis_url: str) -> ApiSettings:
    return ApiSettings(
        redis_url=redis_url,
        keys={"fuzzer": hash_key(KEY)},
        retry_after_s=2,
        llm_endpoints=["small"],
        # Fuzzing sends hundreds of requests a minute; the rate limit is not what is tested here.
        rate_limit_per_minute=1_000_000,
        max_active_jobs_per_key=1_000,
        budget_calls_default=8,
        budget_calls_max=16,
        budget_tokens_default=4_000,
        budget_tokens_max=8_000,
        sse_block_ms=200,
        sse_ping_s=1.0,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    # One worker: Hypothesis, under schemathesis's threads, now and then fails on its own caches.
    parser.add_argument("--workers", type=int, default=1, help="schemathesis workers")
    parser.add_argument("--serve", action="store_true", help="start the stack, print its URL and wait")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="also write the run's log and summary.json here (docs quote it)",
    )
    parser.add_argument("st_args", nargs="*", help="more arguments for st run (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parley-fuzz-") as tmp, ScriptedLLM(latency_s=0.01) as llm:
        work = Path(tmp)
        llm.on(SELECT, "The most helpful knowledge is [1].")
        llm.on(JUDGE, "The agents agree. [Yes]")
        llm.on(SUMMARY, "All agents agree. The final answer is [Paris].")
        llm.on("Question:", "Based on the knowledge, the answer is [Paris].")
        redis_server = RedisServer(work).start()
        try:
            with ClosedPort() as dead_retriever:
                env = worker_env(
                    redis_server.url,
                    llm.base_url,
                    dead_retriever.url,
                    PARLEY_RETRIEVER_CLIENT_MAX_ATTEMPTS="1",
                    PARLEY_RETRIEVER_CLIENT_TIMEOUT_S="1",
                    PARLEY_LLM_ENDPOINTS=json.dumps(
                        {"small": {"base_url": llm.base_url, "model": "scripted"}}
                    ),
                )
                with (
                    WorkerProcess(env, work / "worker.log", concurrency=2),
                    ApiServer(stack_settings(redis_server.url)) as api,
                ):
                    if args.serve:
                        print(f"gateway at {api.url} (key {KEY}); Ctrl-C stops", flush=True)
                        while True:
                            time.sleep(3600)
                    command = [
                        str(Path(sys.executable).with_name("st")),
                        # Every check, on every operation.
                        "--config-file",
                        str(CONFIG),
                        "run",
                        f"{api.url}/openapi.json",
                        "-H",
                        f"Authorization: Bearer {KEY}",
                        "--max-examples",
                        str(args.max_examples),
                        "--seed",
                        str(args.seed),
                        "--generation-deterministic",
                        "--workers",
                        str(args.workers),
                        "--request-timeout",
                        "30",
                        "--continue-on-failure",
                        *args.st_args,
                    ]
                    print("$", " ".join(command).replace(KEY, "$KEY"), flush=True)
                    # Each request its own Idempotency-Key, each batch item its own id, and JSON lines
                    # for the batch file part (bench/fuzz_hooks.py explains the three).
                    env = {**os.environ, "SCHEMATHESIS_HOOKS": "bench.fuzz_hooks", "PYTHONPATH": str(ROOT)}
                    return run_schemathesis(command, work, env, args)
        finally:
            redis_server.stop()


def run_schemathesis(command: list[str], work: Path, env: dict[str, str], args: argparse.Namespace) -> int:
    """Run ``st``, its output shown as it comes; with ``--out``, keep it and its summary there."""
    proc = subprocess.Popen(
        command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    rc = proc.wait()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        log = "".join(lines).replace(KEY, "$KEY")
        (args.out / "schemathesis.log").write_text(log)
        summary = {
            **summarize(log),
            "exit_status": rc,
            "max_examples": args.max_examples,
            "seed": args.seed,
            "workers": args.workers,
            "command": " ".join(["python", "bench/fuzz_live.py", *sys.argv[1:]]),
        }
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return rc


def summarize(log: str) -> dict[str, Any]:
    """Operations, cases (generated, passed, failed, skipped) and seconds from st run's summary."""
    operations = re.search(r"Tested:\s+(\d+)", log)
    counts = re.search(r"^\s*(\d+) generated(.*)$", log, re.M)
    cases = {"generated": int(counts.group(1)) if counts else 0, "passed": 0, "failed": 0, "skipped": 0}
    for number, word in re.findall(r"(\d+) (passed|failed|skipped)", counts.group(2) if counts else ""):
        cases[word] = int(number)
    seconds = re.search(r"in ([\d.]+)s =+\s*$", log, re.M)
    return {
        "operations": int(operations.group(1)) if operations else 0,
        "cases": cases,
        "no_issues": "No issues found" in log,
        "seconds": float(seconds.group(1)) if seconds else None,
    }


if __name__ == "__main__":
    sys.exit(main())

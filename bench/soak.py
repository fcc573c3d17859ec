"""The soak: the whole service for a set time under steady load, with faults arriving while earlier ones
are still being recovered from, and an exact account at the end.

Real processes on loopback: redis-server with AOF, the gateway (`api.cli api`), two Celery workers
(`parley worker`), the retriever (`parley retriever`, over a small slice of the bundled corpus) and the
scripted OpenAI-compatible LLM (in this process, so faults can be switched on and every token it serves
is attributed to the key whose question it answers). Several keys submit single debates (through the
retriever) and batches (without knowledge) continuously. Faults, one every ``--fault-every`` seconds in
turn: a worker SIGKILLed (restarted 2 s later, as a supervisor would), redis-server SIGKILLed and
restarted from its AOF, the retriever restarted, a burst of 503s from the LLM, a burst of LLM timeouts,
a job's broker message deleted, a client disconnecting from a streamed chat completion.

Reported: jobs submitted / completed / failed (by reason) / cancelled / lost / run twice; tokens charged
(`/v1/usage`) against tokens served (the LLM's count) per key, and job by job: charged exactly (those
with a call that timed out and was answered within the client's grace counted apart), charged a call's
worst case because the server answered it only after the client had cut it, or because a killed worker
cut it, or neither (a defect); p50/p99 gateway latency per window; RSS
of every service process and Redis memory per window, and how far each moved after the first window;
how long each fault took to recover from. JSON, a markdown table and a PNG plot go to ``--out``.

``--job-ttl-s`` is the retention (``PARLEY_JOB_TTL_S``, given to the gateway and the workers, and the
retriever's ``PARLEY_RETRIEVER_POOL_TTL_S``): with one shorter than the run, finished jobs and built pools
expire while it goes on and Redis and retriever memory level off after the first retention; each
job's own account (tokens charged, attempts) is read from the store once its last calls have settled,
before its record can expire. The harness (this process: the load, its
ledger of every job and request, and the scripted LLM, which keeps no per-request history here) is
reported apart from the service processes.

    .venv/bin/python -m bench.soak --minutes 60 --out reports/soak      # the benchmark (`make soak`)
    .venv/bin/python -m bench.soak --minutes 3 --fault-every 20 --window-minutes 1 --out /tmp/soak
    .venv/bin/python -m bench.soak --minutes 4 --fault-every 60 --job-ttl-s 120 --window-minutes 1

This module runs the soak: the load, the memory samples, the accounts read as jobs settle, and the
command line. Its parts: ``bench.soak_ledger`` (what happened), ``bench.soak_stack`` (the processes),
``bench.soak_faults`` (the faults), ``bench.soak_checks`` (the checks) and ``bench.soak_report``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness.cli import study_parser
from bench.harness.processes import exit_on_sigterm
from bench.harness.procfs import memory_mb
from bench.harness.reports import command_line, write_json, write_markdown
from bench.soak_checks import SoakRecord, tally
from bench.soak_faults import FAULTS, FaultInjector
from bench.soak_ledger import (
    KEYS,
    SETTLE_S,
    SINGLE_CONFIG,
    TERMINAL,
    GatewayClient,
    Job,
    Ledger,
)
from bench.soak_report import markdown, plot
from bench.soak_stack import ANON, HARNESS, SoakStack
from parley_testing.processes import ROOT

__all__ = ["FAULTS", "Soak", "main"]


class Soak:
    """One run: the service, the load on it, the faults, and what was recorded."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.ledger = Ledger()
        self.stack = SoakStack(tmp, self.ledger, args.llm_latency, args.job_ttl_s)
        self.stop = threading.Event()
        self.rng = random.Random(args.seed)
        self.injector = FaultInjector(args, self.stack, self.ledger, self.stop, self.rng)
        self.record = SoakRecord(
            self.ledger, [], cut_by_kill=self.injector.cut_by_kill, faults=self.injector.faults
        )

    # -- load --------------------------------------------------------------------------------------
    def single_load(self, gw: GatewayClient, key: str) -> None:
        """Keep ``--active`` single debates of this key going: submit, then poll them to the end."""
        mine: list[Job] = []
        while not self.stop.is_set():
            mine = [j for j in mine if j.status not in TERMINAL]
            if len(mine) < self.args.active:
                job = gw.submit(key, "single", SINGLE_CONFIG)
                if job is not None:
                    mine.append(job)
            for job in mine:
                gw.refresh(job)
            time.sleep(0.5)

    def batch_load(self, gw: GatewayClient) -> None:
        """A batch of 4 to 8 debates from a random key every ``--batch-every`` seconds."""
        while not self.stop.wait(self.args.batch_every):
            key = self.rng.choice(["alice", "bob", "carol"])
            gw.submit_batch(key, self.rng.randint(4, 8))

    def poll_batches(self, gw: GatewayClient) -> None:
        """Every open batch job's status every 2 s, so each one's end is seen (and timed)."""
        while not self.stop.wait(2.0):
            for job in self.ledger.open_jobs():
                if job.kind == "batch":
                    gw.refresh(job)

    def sample(self, gw: GatewayClient) -> None:
        """RSS of every process and Redis's memory every ``--sample-every`` seconds."""
        while not self.stop.wait(self.args.sample_every):
            row: dict[str, Any] = {"t": round(time.monotonic() - self.ledger.t0, 1)}
            for name, pid in self.stack.processes().items():
                rss, anon = memory_mb(pid, tree=name != HARNESS) if pid else (None, None)
                row[name] = None if rss is None else round(rss, 1)
                row[f"{name}{ANON}"] = None if anon is None else round(anon, 1)
            try:
                client = self.stack.redis.client()
                info = client.info("memory")
                row["redis_used_mb"] = round(int(info["used_memory"]) / 2**20, 2)
                row["redis_keys"] = int(client.dbsize())
                client.close()
            except Exception:  # Redis down during a fault
                row["redis_used_mb"] = None
            self.record.samples.append(row)

    def run(self) -> dict[str, Any]:
        """Start the service, load it for ``--minutes`` with the faults going, wait for every job to
        end and its calls to settle, then tally: the report."""
        self.stack.start_all()
        self.record.process_names = list(self.stack.processes())
        gw = GatewayClient(self.stack.api_url, self.ledger)
        self.ledger.t0 = time.monotonic()
        threads = [
            threading.Thread(target=self.single_load, args=(gw, k), daemon=True)
            for k in ("alice", "bob", "carol")
        ]
        threads += [
            threading.Thread(target=self.batch_load, args=(gw,), daemon=True),
            threading.Thread(target=self.poll_batches, args=(gw,), daemon=True),
            threading.Thread(target=self.sample, args=(gw,), daemon=True),
        ]
        faults = threading.Thread(target=self.injector.fault_loop, args=(gw,), daemon=True)
        accounts_done = threading.Event()
        accountant = threading.Thread(target=self.keep_accounts, args=(accounts_done,), daemon=True)
        for t in [*threads, faults, accountant]:
            t.start()
        end = time.monotonic() + self.args.minutes * 60
        while time.monotonic() < end:
            time.sleep(5)
            with self.ledger.lock:  # the load threads add jobs meanwhile
                seen = list(self.ledger.jobs.values())
            done = sum(1 for j in seen if j.status in TERMINAL)
            print(
                f"[soak] {time.monotonic() - self.ledger.t0:6.0f} s: {len(seen)} jobs, {done} ended",
                flush=True,
            )
        self.stop.set()
        faults.join(timeout=900)
        for t in threads:
            t.join(timeout=30)
        # Every job must end: wait for the last ones (the sweep resends, the workers finish).
        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline and self.ledger.open_jobs():
            for job in self.ledger.open_jobs():
                gw.refresh(job)
            time.sleep(1)
        time.sleep(SETTLE_S)  # calls in flight at a cancel are settled within 10 s
        accounts_done.set()
        accountant.join(timeout=60)
        # Jobs still kept are read now; those that expired keep the account read when they settled.
        for job_id, account in self.stack.job_charges(list(self.ledger.jobs)).items():
            if account["status"] is not None or job_id not in self.record.job_charges:
                self.record.job_charges[job_id] = account
        usage = {}
        for key in KEYS:
            resp = gw.call(key, "GET", "/v1/usage")
            usage[key] = resp.json()["today"] if resp is not None and resp.status_code == 200 else {}
        return tally(
            self.record,
            usage,
            minutes=self.args.minutes,
            window_minutes=self.args.window_minutes,
            job_ttl_s=self.args.job_ttl_s,
        )

    def keep_accounts(self, done: threading.Event) -> None:
        """Read each ended job's own account (tokens charged, attempts) once its calls have settled,
        while the job is still retained: with a retention shorter than the run it expires later."""
        while not done.wait(5.0):
            now = time.monotonic() - self.ledger.t0
            with self.ledger.lock:
                settled = [
                    j.job_id
                    for j in self.ledger.jobs.values()
                    if j.ended_at is not None
                    and now - j.ended_at >= SETTLE_S
                    and j.job_id not in self.record.job_charges
                ]
            try:
                read = self.stack.job_charges(settled)
            except Exception:  # Redis down during a fault: read them on the next pass
                continue
            self.record.job_charges.update(
                {job_id: a for job_id, a in read.items() if a["status"] is not None}
            )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = study_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument(
        "--fault-every", type=float, default=90, help="seconds between faults (they overlap); 0: none"
    )
    parser.add_argument("--warmup", type=float, default=20, help="seconds before the first fault")
    parser.add_argument("--faults", default="", help="only these kinds, comma-separated (default: all)")
    parser.add_argument("--window-minutes", type=float, default=10)
    parser.add_argument("--active", type=int, default=2, help="single debates each key keeps going")
    parser.add_argument("--batch-every", type=float, default=20, help="seconds between batches")
    parser.add_argument("--burst-s", type=float, default=15, help="length of an LLM 503 or timeout burst")
    parser.add_argument("--llm-latency", type=float, default=0.2, help="the scripted LLM's reply time")
    parser.add_argument("--sample-every", type=float, default=10)
    parser.add_argument("--drain", type=float, default=300, help="seconds to let the last jobs end")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--job-ttl-s",
        type=int,
        default=None,
        help="retention (PARLEY_JOB_TTL_S) for gateway and workers, and the retriever's pool TTL, "
        "at least 60; unset: their defaults",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "soak")
    args = parser.parse_args(argv)
    if args.job_ttl_s is not None and args.job_ttl_s < 60:
        parser.error("--job-ttl-s must be at least 60 (PARLEY_JOB_TTL_S's lower bound)")
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="parley-soak-"))
    soak = Soak(args, tmp)
    exit_on_sigterm()
    try:
        report = soak.run()
    finally:
        soak.stop.set()
        soak.stack.stop()
    command = command_line("bench.soak", argv)
    report["command"] = command
    report["logs"] = str(tmp)
    write_json(args.out / "soak.json", report)
    print(write_markdown(args.out / "soak.md", markdown(report, command)))
    plot(report, soak.ledger.latencies, args.out / "soak.png")
    return report


if __name__ == "__main__":
    main()

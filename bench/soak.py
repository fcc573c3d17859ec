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
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from api.guards import hash_key
from bench.gateway_bench import start_process, wait_http
from bench.hostile_tenant import script
from parley_testing.processes import ROOT, RedisServer, WorkerProcess, worker_env
from parley_testing.scripted_llm import SUMMARY, ScriptedLLM, free_port, request_text

KEYS = {
    "alice": "alice-soak-key-0123456789",
    "bob": "bob-soak-key-0123456789",
    "carol": "carol-soak-key-0123456789",
    "ops": "ops-soak-key-0123456789",  # the fault thread's probes and streams
}
TAG = re.compile(r"Soak job ([a-z]+)-(\d+)\b")
TERMINAL = {"completed", "failed", "cancelled"}
RUNNING = {"retrieving", "debating"}
SINGLE_CONFIG: dict[str, Any] = {"knowledge": "wikipedia", "k_wiki": 3, "rounds": 2}
BATCH_CONFIG: dict[str, Any] = {"knowledge": "none", "rounds": 2}
FAULTS = (
    "worker_kill",
    "llm_503",
    "redis_kill",
    "broker_delete",
    "retriever_restart",
    "llm_timeout",
    "client_disconnect",
)
# The workers' LLM client timeout; a timeout burst answers 2 s slower than this, within the client's
# grace (PARLEY_LLM_TIMEOUT_GRACE_S, 10 s by default), so those calls are charged what was served.
LLM_TIMEOUT_S = 4.0
# A job's calls in flight when it ended are settled this long after (a cancel's or a timeout's within
# 10 s): its account in the store is final then, and is read before its record can expire (retention
# >= 60 s).
SETTLE_S = LLM_TIMEOUT_S + 12
HARNESS = "harness"  # this process's column: not a service
ANON = " anon"  # a sample's key for a process's anonymous memory (RssAnon): "<name> anon"


# --------------------------------------------------------------------------------------------------
# What happened: jobs, requests, tokens
# --------------------------------------------------------------------------------------------------


@dataclass
class Job:
    key: str
    tag: str
    kind: str  # single | batch | stream | probe
    job_id: str = ""
    submitted_at: float = 0.0
    status: str = "queued"
    error: str | None = None
    ended_at: float | None = None


class Ledger:
    """Every job submitted, every gateway request's latency, every token served, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, Job] = {}  # by job id
        self.counter = Counter[str]()
        self.latencies: list[tuple[float, float]] = []  # (when, seconds)
        self.errors = Counter[str]()  # gateway requests that failed, by what
        self.served: Counter[str] = Counter()  # key -> tokens answered to a client still waiting
        self.abandoned: Counter[str] = Counter()  # key -> tokens answered after the client left
        # Tokens answered after the client's deadline (LLM_TIMEOUT_S) to a request it still kept
        # open, in its grace: the client timed out, and will charge what the reply says.
        self.in_grace: Counter[str] = Counter()
        self.summaries: Counter[str] = Counter()  # tag -> summary calls served
        self.served_tag: Counter[str] = Counter()  # tag -> tokens answered to a waiting client
        self.abandoned_tag: Counter[str] = Counter()  # tag -> tokens answered after it left
        self.in_grace_tag: Counter[str] = Counter()  # tag -> replies that came in a timeout's grace
        self.t0 = time.monotonic()

    def tag(self, key: str) -> str:
        with self.lock:
            self.counter[key] += 1
            return f"{key}-{self.counter[key]}"

    def add(self, job: Job) -> None:
        with self.lock:
            self.jobs[job.job_id] = job

    def request(self, seconds: float) -> None:
        with self.lock:
            self.latencies.append((time.monotonic() - self.t0, seconds))

    def on_served(self, body: dict[str, Any], tokens: int, abandoned: bool, took_s: float) -> None:
        text = request_text(body)
        match = TAG.search(text)
        key = match.group(1) if match else "?"
        tag = f"{match.group(1)}-{match.group(2)}" if match else "?"
        with self.lock:
            (self.abandoned if abandoned else self.served)[key] += tokens
            (self.abandoned_tag if abandoned else self.served_tag)[tag] += tokens
            if not abandoned and took_s > LLM_TIMEOUT_S:
                self.in_grace[key] += tokens
                self.in_grace_tag[tag] += 1
            if match and SUMMARY in text and not abandoned:
                self.summaries[f"{match.group(1)}-{match.group(2)}"] += 1

    def open_jobs(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if j.status not in TERMINAL]


def question(tag: str) -> str:
    return f"Soak job {tag}: what is the capital of France?"


class Gateway:
    """HTTP to the gateway, every request timed; transport errors (Redis or the gateway down) counted."""

    def __init__(self, url: str, ledger: Ledger) -> None:
        self.url = url
        self.ledger = ledger
        self.clients = {
            key: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=30)
            for key, secret in KEYS.items()
        }

    def call(self, key: str, method: str, path: str, **kw: Any) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            resp = self.clients[key].request(method, path, **kw)
        except httpx.HTTPError as exc:
            self.ledger.errors[type(exc).__name__] += 1
            return None
        self.ledger.request(time.perf_counter() - started)
        if resp.status_code >= 500:
            self.ledger.errors[f"HTTP {resp.status_code}"] += 1
        return resp

    def submit(self, key: str, kind: str, config: dict[str, Any]) -> Job | None:
        job = Job(key, self.ledger.tag(key), kind, submitted_at=time.monotonic() - self.ledger.t0)
        resp = self.call(key, "POST", "/v1/debates", json={"question": question(job.tag), "config": config})
        if resp is None or resp.status_code != 202:
            return None
        job.job_id = resp.json()["job_id"]
        self.ledger.add(job)
        return job

    def submit_batch(self, key: str, n: int) -> list[Job]:
        jobs = [Job(key, self.ledger.tag(key), "batch") for _ in range(n)]
        items = [{"id": j.tag, "question": question(j.tag)} for j in jobs]
        resp = self.call(key, "POST", "/v1/batches", json={"items": items, "config": BATCH_CONFIG})
        if resp is None or resp.status_code != 202:
            return []
        batch_id = resp.json()["batch_id"]
        listing = self.call(key, "GET", f"/v1/batches/{batch_id}/results")
        if listing is None or listing.status_code != 200:
            return []
        by_tag = {j.tag: j for j in jobs}
        for line in listing.text.splitlines():
            row = json.loads(line)
            job = by_tag.get(str(row.get("id")))
            if job is not None and row.get("job_id"):
                job.job_id = row["job_id"]
                job.submitted_at = time.monotonic() - self.ledger.t0
                self.ledger.add(job)
        return [j for j in jobs if j.job_id]

    def refresh(self, job: Job) -> None:
        resp = self.call(job.key, "GET", f"/v1/debates/{job.job_id}")
        if resp is None:
            return
        if resp.status_code == 404:
            job.status = "missing"
            return
        if resp.status_code != 200:
            return
        body = resp.json()
        job.status = body["status"]
        if job.status in TERMINAL and job.ended_at is None:
            job.ended_at = time.monotonic() - self.ledger.t0
            job.error = body.get("error")

    def wait_terminal(self, job: Job, timeout_s: float) -> float | None:
        """Seconds until ``job`` is terminal (polled), None if it is not within ``timeout_s``."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            self.refresh(job)
            if job.status in TERMINAL:
                return time.monotonic() - started
            time.sleep(0.25)
        return None


# --------------------------------------------------------------------------------------------------
# The processes
# --------------------------------------------------------------------------------------------------


class Stack:
    def __init__(self, tmp: Path, ledger: Ledger, llm_latency_s: float, job_ttl_s: int | None = None) -> None:
        self.tmp = tmp
        self.ledger = ledger
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
        self.base_env.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})
        # The retention, through the one variable the gateway and the workers read (unset: theirs).
        self.retention = {"PARLEY_JOB_TTL_S": str(job_ttl_s)} if job_ttl_s else {}
        # The retriever keeps every pool it built for its own TTL (a day by default, each question in
        # the soak is new): with a retention, pools expire on the same clock and are swept twice per
        # TTL, so the retriever's memory must level off like Redis's.
        self.pool_retention = (
            {
                "PARLEY_RETRIEVER_POOL_TTL_S": str(job_ttl_s),
                "PARLEY_RETRIEVER_SWEEP_INTERVAL_S": str(max(30, job_ttl_s // 2)),
            }
            if job_ttl_s
            else {}
        )
        self.redis = RedisServer(tmp / "redis", appendonly=True)
        # An hour of calls: the server keeps no history of them (the ledger counts what it needs).
        self.llm = ScriptedLLM(latency_s=llm_latency_s, record=False)
        self.llm_latency_s = llm_latency_s
        self.api_port, self.retriever_port = free_port(), free_port()
        self.api: subprocess.Popen[bytes] | None = None
        self.retriever: subprocess.Popen[bytes] | None = None
        self.workers: list[WorkerProcess] = []

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def retriever_url(self) -> str:
        return f"http://127.0.0.1:{self.retriever_port}"

    def start(self) -> None:
        self.redis.start()
        script(self.llm)
        self.llm.on_served = self.ledger.on_served
        self.llm.start()
        self._build_index()
        self.start_retriever()
        api_env = {
            **self.base_env,
            **self.retention,
            "PARLEY_API_REDIS_URL": self.redis.url,
            "PARLEY_API_RATE_LIMIT_PER_MINUTE": "1000000",
            "PARLEY_API_KEYS": json.dumps({k: hash_key(v) for k, v in KEYS.items()}),
        }
        args = [sys.executable, "-m", "api.cli", "api", "--host", "127.0.0.1", "--port", str(self.api_port)]
        self.api = start_process(args, api_env, self.tmp / "api.log")
        wait_http(f"{self.api_url}/healthz")
        for i in range(2):
            self.workers.append(self._worker(i).start())

    def _build_index(self) -> None:
        """A small index of the real corpus (the retriever's own build code), once per run."""
        code = (
            "import sys; from retriever.corpus import read_vital; from retriever.indexer import build_index;"
            "from retriever.settings import RetrieverSettings as S;"
            "s = S(data_dir=sys.argv[1], warmup=False); p = list(read_vital(100, titles=sys.argv[2:]));"
            "build_index(s, p, corpus='vital', total=len(p), progress=False)"
        )
        titles = ["Paris", "France", "Eiffel Tower", "Moon", "Apollo 11", "Tokyo", "Mars", "Nile"]
        with (self.tmp / "index.log").open("ab") as log:
            subprocess.run(
                [sys.executable, "-c", code, str(self.tmp / "index"), *titles],
                env=self.base_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
            )  # fmt: skip

    def start_retriever(self) -> None:
        env = {**self.base_env, **self.pool_retention, "PARLEY_RETRIEVER_DATA_DIR": str(self.tmp / "index")}
        args = [sys.executable, "-m", "parley_cli", "retriever", "--host", "127.0.0.1"]
        args += ["--port", str(self.retriever_port)]
        self.retriever = start_process(args, env, self.tmp / "retriever.log")
        wait_http(f"{self.retriever_url}/healthz", timeout_s=180)

    def stop_retriever(self) -> None:
        if self.retriever is not None and self.retriever.poll() is None:
            os.killpg(self.retriever.pid, signal.SIGTERM)
            try:
                self.retriever.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.retriever.pid, signal.SIGKILL)
                self.retriever.wait(timeout=10)

    def _worker(self, i: int) -> WorkerProcess:
        env = worker_env(
            self.redis.url,
            self.llm.base_url,
            self.retriever_url,
            PARLEY_LLM_TIMEOUT_S=str(LLM_TIMEOUT_S),
            PARLEY_WORKER_LEASE_TTL_S="6",
            **self.retention,
        )
        return WorkerProcess(env, self.tmp / f"worker-{i + 1}.log", concurrency=2, name=f"w{i + 1}")

    def kill_worker(self, i: int) -> None:
        proc = self.workers[i].proc
        assert proc is not None
        os.killpg(proc.pid, signal.SIGKILL)  # the Celery main process and its pool children
        proc.wait(timeout=10)
        time.sleep(2)
        self.workers[i] = self._worker(i).start()

    def jobs_running_on(self, i: int) -> list[str]:
        """The jobs worker ``i``'s processes are running now (the job record names the process)."""
        proc = self.workers[i].proc
        assert proc is not None
        pids = {str(p) for p in descendants(proc.pid)}
        client = self.redis.client()
        try:
            found = []
            for key in client.scan_iter(match="parley:owner:*:active", count=500):
                for job_id in client.smembers(key):
                    status, worker = client.hmget(f"parley:job:{job_id}", ["status", "worker"])
                    if status in RUNNING and worker and worker.split("/")[1] in pids:
                        found.append(job_id)
            return found
        finally:
            client.close()

    def job_charges(self, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Each job's own account in the store: tokens charged, attempts, status."""
        client = self.redis.client()
        try:
            out = {}
            for job_id in job_ids:
                used, attempts, status = client.hmget(
                    f"parley:job:{job_id}", ["used_tokens", "attempts", "status"]
                )
                out[job_id] = {"charged": int(used or 0), "attempts": int(attempts or 0), "status": status}
            return out
        finally:
            client.close()

    def kill_redis(self) -> None:
        assert self.redis.proc is not None
        self.redis.proc.send_signal(signal.SIGKILL)
        self.redis.proc.wait(timeout=10)
        time.sleep(2)
        self.redis.start()  # the same port and folder: it loads its AOF

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.stop_retriever()
        if self.api is not None and self.api.poll() is None:
            os.killpg(self.api.pid, signal.SIGTERM)
            self.api.wait(timeout=20)
        self.llm.stop()
        self.redis.stop()

    def processes(self) -> dict[str, int]:
        out = {
            "gateway": self.api.pid if self.api else 0,
            "retriever": self.retriever.pid if self.retriever else 0,
        }
        for i, worker in enumerate(self.workers):
            out[f"worker-{i + 1}"] = worker.proc.pid if worker.proc else 0
        out["redis-server"] = self.redis.proc.pid if self.redis.proc else 0
        out[HARNESS] = os.getpid()
        return out


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    pids, frontier = {pid}, {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - pids
        pids |= frontier
    return pids


def memory_mb(pid: int, *, tree: bool = True) -> tuple[float, float]:
    """Resident memory of ``pid`` and (``tree``) every process below it, in MB, read in one pass over
    their ``/proc/<pid>/status``: all of it (``VmRSS``) and its anonymous part (``RssAnon``: heaps, not
    the pages of mapped files such as a model's weights or a Qdrant shard's write-ahead log, which the
    kernel can drop and read again)."""
    pids = descendants(pid) if tree else {pid}
    rss = anon = 0
    for p in pids:
        try:
            for line in (Path("/proc") / str(p) / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, anon / 1024


# --------------------------------------------------------------------------------------------------
# Load and faults
# --------------------------------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.ledger = Ledger()
        self.stack = Stack(tmp, self.ledger, args.llm_latency, args.job_ttl_s)
        self.stop = threading.Event()
        self.faults: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.rng = random.Random(args.seed)
        self.job_charges: dict[str, dict[str, Any]] = {}
        # Jobs a killed worker was running: its call in flight stays charged at its worst case (the
        # server may have served it; nothing can tell), so their accounts are listed apart.
        self.cut_by_kill: set[str] = set()

    # -- load --------------------------------------------------------------------------------------
    def single_load(self, gw: Gateway, key: str) -> None:
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

    def batch_load(self, gw: Gateway) -> None:
        while not self.stop.wait(self.args.batch_every):
            key = self.rng.choice(["alice", "bob", "carol"])
            gw.submit_batch(key, self.rng.randint(4, 8))

    def poll_batches(self, gw: Gateway) -> None:
        while not self.stop.wait(2.0):
            for job in self.ledger.open_jobs():
                if job.kind == "batch":
                    gw.refresh(job)

    def sample(self, gw: Gateway) -> None:
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
            self.samples.append(row)

    # -- faults ------------------------------------------------------------------------------------
    def probe(self, gw: Gateway, timeout_s: float = 300) -> float | None:
        """Seconds until a new debate (through the retriever) completes; None if it does not."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            job = gw.submit("ops", "probe", SINGLE_CONFIG)
            if job is None:  # the gateway or Redis is not back yet
                time.sleep(0.5)
                continue
            left = timeout_s - (time.monotonic() - started)
            if gw.wait_terminal(job, left) is not None and job.status == "completed":
                return time.monotonic() - started
            time.sleep(0.5)
        return None

    def inject(self, gw: Gateway, kind: str) -> dict[str, Any]:
        at = time.monotonic() - self.ledger.t0
        record: dict[str, Any] = {"kind": kind, "at_s": round(at, 1)}
        started = time.monotonic()
        if kind == "worker_kill":
            victim = self.rng.randrange(2)
            running = self.stack.jobs_running_on(victim)
            self.cut_by_kill.update(running)
            self.stack.kill_worker(victim)
            ended = time.monotonic()
            jobs = [self.ledger.jobs.get(job_id) or Job("ops", "?", "unknown", job_id) for job_id in running]
            waits = [gw.wait_terminal(j, 300) for j in jobs]
            record["jobs_running"] = len(running)
            record["recovered_s"] = None if None in waits else round(time.monotonic() - ended, 1)
            if not running:
                record["recovered_s"] = _round(self.probe(gw))
        elif kind == "redis_kill":
            self.stack.kill_redis()
            ended = time.monotonic()
            record["recovered_s"] = _round(self.probe(gw))
            _ = ended
        elif kind == "retriever_restart":
            self.stack.stop_retriever()
            self.stack.start_retriever()
            record["restart_s"] = round(time.monotonic() - started, 1)
            record["recovered_s"] = _round(self.probe(gw))
        elif kind in ("llm_503", "llm_timeout"):
            burst = self.args.burst_s
            if kind == "llm_503":
                self.stack.llm.fail_for(burst, status=503)
                time.sleep(burst)
            else:
                self.stack.llm.latency_s = LLM_TIMEOUT_S + 2
                time.sleep(burst)
                self.stack.llm.latency_s = self.stack.llm_latency_s
            record["burst_s"] = burst
            record["recovered_s"] = _round(self.probe(gw))
        elif kind == "broker_delete":
            record.update(self.delete_message(gw))
        elif kind == "client_disconnect":
            record.update(self.disconnect(gw))
        record["fault_and_recovery_s"] = round(time.monotonic() - started, 1)
        return record

    def delete_message(self, gw: Gateway) -> dict[str, Any]:
        """Delete one queued job's broker message (as a lost message): a batch is queued behind a
        busy service so some message waits; recovery is the time until that job has ended."""
        jobs = gw.submit_batch("ops", 12)
        client = self.stack.redis.client()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for queue in ("parley.batch", "parley.interactive"):
                    for message in client.lrange(queue, 0, -1):
                        match = re.search(r"job_[0-9a-f]{32}", message)
                        if match and client.lrem(queue, 1, message) == 1:
                            lost = next((j for j in jobs if j.job_id == match.group(0)), None)
                            lost = lost or self.ledger.jobs.get(match.group(0))
                            if lost is None:
                                return {"deleted": match.group(0), "recovered_s": None}
                            took = gw.wait_terminal(lost, 600)
                            return {
                                "deleted": lost.job_id,
                                "recovered_s": _round(took),
                                "status": lost.status,
                            }
                time.sleep(0.05)
        finally:
            client.close()
        return {"deleted": None, "recovered_s": None, "note": "no message stayed queued long enough"}

    def disconnect(self, gw: Gateway) -> dict[str, Any]:
        """A streamed chat completion whose client goes away after its first chunk: the debate is
        cancelled; recovery is the time until its job has ended (and its calls are settled)."""
        tag = self.ledger.tag("ops")
        body = {
            "model": "parley-madke",
            "stream": True,
            "messages": [{"role": "user", "content": question(tag)}],
        }
        job_id = None
        try:
            with gw.clients["ops"].stream("POST", "/v1/chat/completions", json=body, timeout=60) as resp:
                for line in resp.iter_lines():
                    match = re.search(r"chatcmpl-(job_[0-9a-f]{32})", line)
                    if match:
                        job_id = match.group(1)
                        break
        except httpx.HTTPError as exc:
            return {"recovered_s": None, "note": f"stream failed: {exc!r}"}
        gone = time.monotonic()
        if job_id is None:
            return {"recovered_s": None, "note": "no chunk"}
        job = Job("ops", tag, "stream", job_id, gone - self.ledger.t0)
        self.ledger.add(job)
        took = gw.wait_terminal(job, 120)
        return {"job": job_id, "status": job.status, "recovered_s": _round(took)}

    def fault_loop(self, gw: Gateway) -> None:
        if self.args.fault_every <= 0:  # a fault-free run: the baseline the latencies are compared to
            return
        threads: list[threading.Thread] = []
        i = 0
        while not self.stop.wait(self.args.fault_every if i else self.args.warmup):
            kinds = self.args.faults.split(",") if self.args.faults else FAULTS
            kind = kinds[i % len(kinds)]
            i += 1

            def run(kind: str = kind) -> None:
                try:
                    record = self.inject(gw, kind)
                except Exception as exc:  # a fault that could not be injected is reported, not fatal
                    record = {"kind": kind, "error": repr(exc)}
                print(f"[soak] fault {json.dumps(record)}", flush=True)
                self.faults.append(record)

            thread = threading.Thread(target=run, name=f"fault-{kind}", daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(timeout=600)

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.stack.start()
        gw = Gateway(self.stack.api_url, self.ledger)
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
        faults = threading.Thread(target=self.fault_loop, args=(gw,), daemon=True)
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
            if account["status"] is not None or job_id not in self.job_charges:
                self.job_charges[job_id] = account
        usage = {}
        for key in KEYS:
            resp = gw.call(key, "GET", "/v1/usage")
            usage[key] = resp.json()["today"] if resp is not None and resp.status_code == 200 else {}
        return self.report(usage)

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
                    and j.job_id not in self.job_charges
                ]
            try:
                read = self.stack.job_charges(settled)
            except Exception:  # Redis down during a fault: read them on the next pass
                continue
            self.job_charges.update({job_id: a for job_id, a in read.items() if a["status"] is not None})

    def report(self, usage: dict[str, dict[str, Any]]) -> dict[str, Any]:
        jobs = list(self.ledger.jobs.values())
        statuses = Counter(j.status for j in jobs)
        reasons = Counter(_reason(j.error) for j in jobs if j.status == "failed")
        # Run twice: more final (summary) calls served for a job than it had attempts, i.e. two runs of
        # it at once or a finished job run again. A job whose worker was killed while its summary was
        # in flight resumes from its last round and asks for the summary once more: repeated, not twice.
        attempts = {j.tag: int(self.job_charges.get(j.job_id, {}).get("attempts") or 1) for j in jobs}
        twice = sorted(t for t, n in self.ledger.summaries.items() if n > max(1, attempts.get(t, 1)))
        repeated = sorted(t for t, n in self.ledger.summaries.items() if 1 < n <= attempts.get(t, 1))
        per_key = {}
        for key in KEYS:
            charged = int(usage.get(key, {}).get("tokens", 0))
            served = self.ledger.served[key]
            per_key[key] = {
                "charged": charged,
                "served": served,
                "served_after_the_deadline_within_the_grace": self.ledger.in_grace[key],
                "served_after_client_left": self.ledger.abandoned[key],
                "charged_minus_served": charged - served,
                "reserved_left": usage.get(key, {}).get("reserved"),
            }
        # Job by job: what the store charged against what the LLM served for that job's question. A
        # call that timed out is charged what the server served when it answered within the client's
        # grace (those jobs are counted: charged exactly all the same); one the server answered only
        # after the client had cut it (the grace, or a cancel's settlement wait, ran out) keeps its
        # worst case, and so does a call cut by a killed worker: those jobs are listed apart. Every
        # other job must be charged exactly.
        mismatched: list[dict[str, Any]] = []
        not_in_grace: list[dict[str, Any]] = []
        killed: list[dict[str, Any]] = []
        exact_after_timeout = 0
        for job in jobs:
            account = self.job_charges.get(job.job_id, {})
            served = self.ledger.served_tag[job.tag]
            row = {
                "key": job.key, "tag": job.tag, "job_id": job.job_id, "status": job.status,
                "error": job.error,
                "attempts": account.get("attempts"), "charged": account.get("charged"), "served": served,
                "replies_within_the_grace": self.ledger.in_grace_tag[job.tag],
                "served_after_client_left": self.ledger.abandoned_tag[job.tag],
            }  # fmt: skip
            if account.get("charged") == served:
                exact_after_timeout += 1 if self.ledger.in_grace_tag[job.tag] else 0
                continue
            over = (account.get("charged") or 0) > served
            if job.job_id in self.cut_by_kill and over:
                killed.append(row)
            elif self.ledger.abandoned_tag[job.tag] and over:
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
        window_s = self.args.window_minutes * 60
        windows = []
        n_windows = max(
            1, int(self.args.minutes * 60 // window_s + (1 if self.args.minutes * 60 % window_s else 0))
        )
        for w in range(n_windows):
            lo, hi = w * window_s, (w + 1) * window_s
            lat = sorted(s for t, s in self.ledger.latencies if lo <= t < hi)
            rows = [r for r in self.samples if lo <= r["t"] < hi]
            windows.append(
                {
                    "window": f"{lo / 60:.0f}-{hi / 60:.0f} min",
                    "requests": len(lat),
                    "p50_ms": _pct(lat, 50),
                    "p99_ms": _pct(lat, 99),
                    "rss_mb": {name: _last([r.get(name) for r in rows]) for name in self.stack.processes()},
                    "anon_mb": {
                        name: _last([r.get(f"{name}{ANON}") for r in rows]) for name in self.stack.processes()
                    },
                    "redis_used_mb": _last([r.get("redis_used_mb") for r in rows]),
                    "redis_keys": _last([r.get("redis_keys") for r in rows]),
                }
            )
        by_kind: dict[str, list[float]] = defaultdict(list)
        for f in self.faults:
            if f.get("recovered_s") is not None:
                by_kind[f["kind"]].append(float(f["recovered_s"]))
        return {
            "minutes": self.args.minutes,
            "job_ttl_s": self.args.job_ttl_s,
            # The yardstick: each process's RSS and Redis memory against their level after the
            # first window (its last sample), the largest move in any later window.
            "drift_after_first_window_pct": _drift(windows),
            # The same for anonymous memory alone: a leak shows here; mapped files (a model's weights, a
            # shard's rotating write-ahead log) move VmRSS without being the process's to free.
            "anon_drift_after_first_window_pct": _drift(windows, "anon_mb"),
            "jobs": {
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
            },
            "tokens": per_key,
            "jobs_charged_not_served": len(mismatched),
            "jobs_charged_not_served_list": mismatched[:50],
            "jobs_with_timed_out_calls_charged_exactly": exact_after_timeout,
            "jobs_charged_worst_case_not_answered_within_the_grace": len(not_in_grace),
            "jobs_not_answered_within_the_grace": not_in_grace[:20],
            "jobs_cut_by_a_killed_worker_charged_worst_case": len(killed),
            "jobs_cut_by_a_killed_worker": killed[:20],
            "gateway_errors": dict(self.ledger.errors),
            "windows": windows,
            "faults": self.faults,
            "recovery_s_by_fault": {
                k: {"n": len(v), "max": max(v), "median": round(statistics.median(v), 1)}
                for k, v in by_kind.items()
            },
            "faults_not_recovered": [f for f in self.faults if f.get("recovered_s") is None],
            "samples": self.samples,
        }


def _drift(windows: list[dict[str, Any]], measure: str = "rss_mb") -> dict[str, float | None]:
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


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def _pct(values: list[float], p: int) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(len(values) * p / 100))] * 1000, 1)


def _last(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return present[-1] if present else None


def _reason(error: str | None) -> str:
    text = re.sub(r"job_[0-9a-f]{32}", "job_…", error or "no reason given")
    return re.sub(r"\d+(\.\d+)?", "N", text)[:120]


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------


def markdown(report: dict[str, Any], command: str) -> str:
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


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["samples"]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ts = [s["t"] / 60 for s in samples]
    for name in [k for k in (samples[0] if samples else {}) if k not in ("t", "redis_used_mb", "redis_keys")]:
        ax1.plot(ts, [s.get(name) for s in samples], label=name)
    ax1.set_ylabel("RSS (MB)")
    ax1.legend(fontsize=7)
    ax2.plot(ts, [s.get("redis_used_mb") for s in samples], label="Redis used memory")
    ax2.set_ylabel("Redis (MB)")
    lat = report.get("_latencies", [])
    if lat:
        ax3.scatter([t / 60 for t, _ in lat], [s * 1000 for _, s in lat], s=1, alpha=0.3)
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    # A SIGTERM (a supervisor, `kill`) ends the run through the finally below, so the service
    # processes it started are stopped rather than left behind.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        report = soak.run()
    finally:
        soak.stop.set()
        soak.stack.stop()
    command = "python -m bench.soak " + " ".join(argv if argv is not None else sys.argv[1:])
    report["command"] = command
    report["logs"] = str(tmp)
    (args.out / "soak.json").write_text(json.dumps(report, indent=2))
    (args.out / "soak.md").write_text(markdown(report, command))
    plot({**report, "_latencies": soak.ledger.latencies}, args.out / "soak.png")
    print(markdown(report, command))
    return report


if __name__ == "__main__":
    main()

"""The service under soak, as real processes on loopback: redis-server with AOF, the gateway, two Celery
workers, the retriever over a small slice of the bundled corpus, and the scripted LLM in the soak's own
process (so faults can be switched on and every token it serves is counted by the ledger). Besides
starting and stopping them, what the faults do to them (a worker or Redis killed and restarted, the
retriever restarted) and what the checks read from the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from api.guards import hash_key
from bench.harness.processes import start_process, wait_http
from bench.harness.procfs import descendants
from bench.harness.scripted import agreeing_debate
from bench.harness.stack import GatewayStack
from bench.soak_ledger import KEYS, LLM_TIMEOUT_S, RUNNING, Ledger
from parley_testing.processes import ROOT, WorkerProcess, worker_env
from parley_testing.scripted_llm import ScriptedLLM, free_port
from services.processes import stop_process

HARNESS = "harness"  # this process's column: not a service
ANON = " anon"  # a sample's key for a process's anonymous memory (RssAnon): "<name> anon"
# The index the retriever serves: a few articles of the bundled corpus the questions are about.
TITLES = ["Paris", "France", "Eiffel Tower", "Moon", "Apollo 11", "Tokyo", "Mars", "Nile"]


class SoakStack(GatewayStack):
    """Redis (with AOF, so a killed one comes back with its data), the gateway, the workers, the
    retriever and the scripted LLM, with a retention (``job_ttl_s``) or each process's default."""

    def __init__(self, tmp: Path, ledger: Ledger, llm_latency_s: float, job_ttl_s: int | None = None) -> None:
        super().__init__(tmp, appendonly=True)
        self.ledger = ledger
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
        # An hour of calls: the server keeps no history of them (the ledger counts what it needs).
        self.llm = ScriptedLLM(latency_s=llm_latency_s, record=False)
        self.llm_latency_s = llm_latency_s
        self.retriever_port = free_port()
        self.retriever: subprocess.Popen[bytes] | None = None
        self.workers: list[WorkerProcess] = []

    @property
    def retriever_url(self) -> str:
        return f"http://127.0.0.1:{self.retriever_port}"

    def start_all(self) -> None:
        """Every process, each once the one it needs answers."""
        self._start_redis_and_script_llm()
        self.llm.start()
        self._build_index()
        self.start_retriever()
        keys = {"PARLEY_API_KEYS": json.dumps({k: hash_key(v) for k, v in KEYS.items()})}
        self.start_gateway({**self.retention, **keys})
        for i in range(2):
            self.workers.append(self._worker(i).start())

    def _start_redis_and_script_llm(self) -> None:
        """Redis up; the scripted LLM told how every debate goes, each call it serves in the ledger."""
        self.redis.start()
        agreeing_debate(self.llm)
        self.llm.on_served = self.ledger.on_served

    def _build_index(self) -> None:
        """A small index of the real corpus (the retriever's own build code), once per run."""
        code = (
            "import sys; from retriever.corpus import read_vital; from retriever.indexer import build_index;"
            "from retriever.settings import RetrieverSettings as S;"
            "s = S(data_dir=sys.argv[1], warmup=False); p = list(read_vital(100, titles=sys.argv[2:]));"
            "build_index(s, p, corpus='vital', total=len(p), progress=False)"
        )
        with (self.tmp / "index.log").open("ab") as log:
            subprocess.run(
                [sys.executable, "-c", code, str(self.tmp / "index"), *TITLES],
                env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
            )  # fmt: skip

    def start_retriever(self) -> None:
        env = {**self.env, **self.pool_retention, "PARLEY_RETRIEVER_DATA_DIR": str(self.tmp / "index")}
        args = [sys.executable, "-m", "parley_cli", "retriever", "--host", "127.0.0.1"]
        args += ["--port", str(self.retriever_port)]
        self.retriever = start_process(args, env, self.tmp / "retriever.log")
        wait_http(f"{self.retriever_url}/healthz", timeout_s=180)

    def stop_retriever(self) -> None:
        stop_process(self.retriever, 20, group=True)

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

    def kill_worker(self, i: int) -> list[str]:
        """SIGKILL worker ``i`` (the Celery main process and its pool children), and start it again 2 s
        later, as a supervisor would. The jobs it was running: those whose record names one of its
        processes, read before the kill and again once it is dead (a job it claimed between the first
        read and the kill was cut all the same)."""
        proc = self.workers[i].proc
        assert proc is not None
        pids = {str(p) for p in descendants(proc.pid)}
        running = set(self.jobs_running_in(pids))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        running.update(self.jobs_running_in(pids))
        time.sleep(2)
        self.workers[i] = self._worker(i).start()
        return sorted(running)

    def jobs_running_on(self, i: int) -> list[str]:
        """The jobs worker ``i``'s processes are running now (the job record names the process)."""
        proc = self.workers[i].proc
        assert proc is not None
        return self.jobs_running_in({str(p) for p in descendants(proc.pid)})

    def jobs_running_in(self, pids: set[str]) -> list[str]:
        """The jobs whose record says one of the processes ``pids`` runs them now."""
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
        """SIGKILL redis-server, and start it again 2 s later on the same port and folder: it loads its
        AOF."""
        assert self.redis.proc is not None
        self.redis.proc.kill()
        self.redis.proc.wait(timeout=10)
        time.sleep(2)
        self.redis.start()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.stop_retriever()
        self.stop_gateway()
        self.llm.stop()
        super().stop()

    def processes(self) -> dict[str, int]:
        """The process id of each service whose memory the soak samples, and its own (the harness)."""
        out = {
            "gateway": self.gateway.proc.pid if self.gateway else 0,
            "retriever": self.retriever.pid if self.retriever else 0,
        }
        for i, worker in enumerate(self.workers):
            out[f"worker-{i + 1}"] = worker.proc.pid if worker.proc else 0
        out["redis-server"] = self.redis.proc.pid if self.redis.proc else 0
        out[HARNESS] = os.getpid()
        return out

"""The soak's faults, injected in turn one every ``--fault-every`` seconds while earlier ones are still
being recovered from, each timed to its recovery: a worker SIGKILLed (restarted 2 s later, as a
supervisor would), redis-server SIGKILLed and restarted from its AOF, the retriever restarted, a burst
of 503s from the LLM, a burst of LLM timeouts, a job's broker message deleted, a client disconnecting
from a streamed chat completion."""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
import time
from typing import Any

import httpx

from bench.harness.stats import round_or_none
from bench.soak_ledger import LLM_TIMEOUT_S, SINGLE_CONFIG, GatewayClient, Job, Ledger, question
from bench.soak_stack import SoakStack

FAULTS = (
    "worker_kill",
    "llm_503",
    "redis_kill",
    "broker_delete",
    "retriever_restart",
    "llm_timeout",
    "client_disconnect",
)


class FaultInjector:
    """Injects the faults and records each (``faults``); the jobs a killed worker was running are kept
    (``cut_by_kill``): their call in flight stays charged at its worst case (the server may have served
    it; nothing can tell), so the checks list their accounts apart."""

    def __init__(
        self,
        args: argparse.Namespace,
        stack: SoakStack,
        ledger: Ledger,
        stop: threading.Event,
        rng: random.Random,
    ) -> None:
        self.args = args
        self.stack = stack
        self.ledger = ledger
        self.stop = stop
        self.rng = rng  # the run's one seeded generator, shared with the load
        self.faults: list[dict[str, Any]] = []
        self.cut_by_kill: set[str] = set()

    def probe(self, gw: GatewayClient, timeout_s: float = 300) -> float | None:
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

    def inject(self, gw: GatewayClient, kind: str) -> dict[str, Any]:
        """One fault of ``kind``, then the wait for the service to recover: its record (when, how long
        the fault and the recovery took, what it touched)."""
        at = time.monotonic() - self.ledger.t0
        record: dict[str, Any] = {"kind": kind, "at_s": round(at, 1)}
        started = time.monotonic()
        if kind == "worker_kill":
            victim = self.rng.randrange(2)
            running = self.stack.kill_worker(victim)
            self.cut_by_kill.update(running)
            ended = time.monotonic()
            jobs = [self.ledger.jobs.get(job_id) or Job("ops", "?", "unknown", job_id) for job_id in running]
            waits = [gw.wait_terminal(j, 300) for j in jobs]
            record["jobs_running"] = len(running)
            record["recovered_s"] = None if None in waits else round(time.monotonic() - ended, 1)
            if not running:
                record["recovered_s"] = round_or_none(self.probe(gw))
        elif kind == "redis_kill":
            self.stack.kill_redis()
            record["recovered_s"] = round_or_none(self.probe(gw))
        elif kind == "retriever_restart":
            self.stack.stop_retriever()
            self.stack.start_retriever()
            record["restart_s"] = round(time.monotonic() - started, 1)
            record["recovered_s"] = round_or_none(self.probe(gw))
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
            record["recovered_s"] = round_or_none(self.probe(gw))
        elif kind == "broker_delete":
            record.update(self.delete_message(gw))
        elif kind == "client_disconnect":
            record.update(self.disconnect(gw))
        record["fault_and_recovery_s"] = round(time.monotonic() - started, 1)
        return record

    def delete_message(self, gw: GatewayClient) -> dict[str, Any]:
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
                                "recovered_s": round_or_none(took),
                                "status": lost.status,
                            }
                time.sleep(0.05)
        finally:
            client.close()
        return {"deleted": None, "recovered_s": None, "note": "no message stayed queued long enough"}

    def disconnect(self, gw: GatewayClient) -> dict[str, Any]:
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
        return {"job": job_id, "status": job.status, "recovered_s": round_or_none(took)}

    def fault_loop(self, gw: GatewayClient) -> None:
        """A fault every ``--fault-every`` seconds after ``--warmup``, each in a thread of its own so they
        overlap, until the run stops; then every fault's recovery is waited for."""
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

"""The soak's record of what happened: every job it submitted, every gateway request's latency and
every token the scripted LLM served, attributed to the key and the job whose question it answers; and
the timed HTTP client the load and the faults reach the gateway through.

A job's question carries its tag (``Soak job alice-12: …``), so a token the LLM serves is counted for
that job and key whatever process asked for it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx

from parley_testing.scripted_llm import SUMMARY, request_text

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
# The workers' LLM client timeout; a timeout burst answers 2 s slower than this, within the client's
# grace (PARLEY_LLM_TIMEOUT_GRACE_S, 10 s by default), so those calls are charged what was served.
LLM_TIMEOUT_S = 4.0
# A job's calls in flight when it ended are settled this long after (a cancel's or a timeout's within
# 10 s): its account in the store is final then, and is read before its record can expire (retention
# >= 60 s).
SETTLE_S = LLM_TIMEOUT_S + 12


@dataclass
class Job:
    """One job the soak submitted, as it last saw it."""

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
    """A job's question, tagged so every token served for it is attributed to it."""
    return f"Soak job {tag}: what is the capital of France?"


class GatewayClient:
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

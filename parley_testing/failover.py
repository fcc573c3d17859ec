"""A Redis failover under load, end to end, and what it cost: the test's and the benchmark's scenario.

A primary with two replicas and three sentinels (``SentinelGroup``), the gateway and a real Celery
worker configured with the ``sentinel://`` URL, a scripted LLM. A batch runs; once a few items are
done, single debates are submitted in a stream and a probe makes acknowledged writes as fast as it
can, then the primary is killed (SIGKILL). The sentinels promote a replica; everything must carry on
against it. ``run_failover`` returns what happened to every job the gateway accepted and to every
write the probe was told had succeeded.

``safe`` switches on what closes the window asynchronous replication leaves: the servers refuse
writes without a connected replica (``min-replicas-to-write 1``) and the job store waits for one
replica after the writes that matter (``redis_wait_replicas=1``; the probe does the same WAIT).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from api.guards import hash_key
from api.settings import ApiSettings
from parley_testing.processes import ApiServer, WorkerProcess, worker_env
from parley_testing.redis_topologies import SentinelGroup
from parley_testing.scripted_llm import JUDGE, SELECT, SUMMARY, ScriptedLLM, request_text
from services.jobstore import unpack_events
from services.redis_connect import RedisSpec, sync_client

KEY = "failover-key"
CALLS_PER_DEBATE = 6  # the agreeing script: one round of MADKE, see ``script_agreeing``
_MARK = re.compile(r"\[(b\d+|s\d+)\]")


@dataclass
class FailoverOutcome:
    """What a failover did to the jobs the gateway accepted and to the probe's acknowledged writes."""

    safe: bool
    accepted: list[str] = field(default_factory=list)  # job ids the gateway answered 202 for
    completed: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # job id -> error
    lost: list[str] = field(default_factory=list)  # accepted, then 404 after the failover
    unfinished: list[str] = field(default_factory=list)  # not terminal at the deadline
    restored: list[str] = field(default_factory=list)  # written back by their worker (job.restored)
    completed_twice: list[str] = field(default_factory=list)  # more than one job.completed event
    rerun_calls: dict[str, int] = field(default_factory=dict)  # item -> LLM calls beyond one debate
    writes_acked: int = 0
    writes_lost: int = 0
    writes_refused: int = 0  # writes Redis refused (down, read-only, no replica): the writer knew
    failover_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "setting": "safe" if self.safe else "defaults",
            "jobs_accepted": len(self.accepted),
            "jobs_completed": self.completed,
            "jobs_failed": len(self.failed),
            "jobs_lost": len(self.lost),
            "jobs_unfinished": len(self.unfinished),
            "jobs_restored_by_worker": len(self.restored),
            "jobs_completed_twice": len(self.completed_twice),
            "items_with_repeated_llm_calls": len(self.rerun_calls),
            "acked_writes": self.writes_acked,
            "acked_writes_lost": self.writes_lost,
            "writes_refused": self.writes_refused,
            "failover_s": round(self.failover_s, 2),
        }


def _script(llm: ScriptedLLM) -> None:
    llm.on(SELECT, "The most helpful knowledge is [1].")
    llm.on(JUDGE, "The agents agree. [Yes]")
    llm.on(SUMMARY, "All agents agree. The final answer is [Paris].")
    llm.on("Question:", "Based on the knowledge, the answer is [Paris].")


class _Probe(threading.Thread):
    """Acknowledged writes, numbered, as fast as Redis takes them (each followed by WAIT when safe)."""

    def __init__(self, spec: RedisSpec, wait_replicas: int) -> None:
        super().__init__(daemon=True)
        self.client = sync_client(spec, socket_timeout=1, socket_connect_timeout=1)
        self.wait_replicas = wait_replicas
        self.acked: list[int] = []
        self.refused = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                with self.client.client() as one:  # WAIT counts the writes of its own connection
                    one.rpush("failover:probe", n)
                    # As the gateway does: not acknowledged unless on enough replicas in time.
                    if self.wait_replicas and one.execute_command("WAIT", self.wait_replicas, 1000) < 1:
                        self.refused += 1
                        continue
                self.acked.append(n)
            except redis.RedisError:
                self.refused += 1
                time.sleep(0.05)


class _Submitter(threading.Thread):
    """Single debates, one every ``every_s``, through the gateway; keeps the ids it was given."""

    def __init__(self, api_url: str, every_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        self.every_s = every_s
        self.accepted: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            body = {"question": f"Capital of France? [s{n}]", "config": {"knowledge": "none"}}
            try:
                resp = self.client.post("/v1/debates", json=body)
                if resp.status_code == 202:
                    self.accepted.append(resp.json()["job_id"])
            except httpx.HTTPError:
                pass
            time.sleep(self.every_s)


def _status(client: httpx.Client, job_id: str) -> tuple[int, dict[str, Any]]:
    resp = client.get(f"/v1/debates/{job_id}")
    return resp.status_code, (resp.json() if resp.headers.get("content-type", "").endswith("json") else {})


def run_failover(
    workdir: Path, *, safe: bool, batch_items: int = 12, lag_s: float = 0.5, timeout_s: float = 180.0
) -> FailoverOutcome:
    """Run the scenario once in ``workdir`` (see the module docstring) and report what it lost.

    ``lag_s``: for this long before the primary dies its replicas receive nothing (``HeldLink``), as
    over a slow or cut link; on loopback they would otherwise be behind by well under a millisecond
    and the window asynchronous replication leaves would hardly ever be hit. 0 = no lag."""
    outcome = FailoverOutcome(safe=safe)
    group = SentinelGroup(workdir / "redis", replicas=2, min_replicas_to_write=1 if safe else 0).start()
    try:
        _run(group, workdir, outcome, batch_items, lag_s, timeout_s)
    finally:
        group.stop()
    return outcome


def _run(
    group: SentinelGroup,
    workdir: Path,
    outcome: FailoverOutcome,
    batch_items: int,
    lag_s: float,
    timeout_s: float,
) -> None:
    wait = 1 if outcome.safe else 0
    served: Counter[str] = Counter()  # item mark -> LLM calls answered for it

    def count(body: dict[str, Any], tokens: int, client_gone: bool, took_s: float) -> None:
        match = _MARK.search(request_text(body))
        served[match.group(1) if match else "?"] += 1

    settings = ApiSettings(
        redis_url=group.url,
        redis_sentinel_master=group.master,
        redis_wait_replicas=wait,
        keys={"failover": hash_key(KEY)},
        retry_after_s=1,
    )
    with ScriptedLLM(latency_s=0.2) as llm, ApiServer(settings) as api:
        _script(llm)
        llm.on_served = count
        env = worker_env(
            group.url,
            llm.base_url,
            PARLEY_WORKER_REDIS_SENTINEL_MASTER=group.master,
            PARLEY_WORKER_REDIS_WAIT_REPLICAS=str(wait),
            PARLEY_WORKER_LEASE_TTL_S="2",
            PARLEY_WORKER_SWEEP_INTERVAL_S="1",
            PARLEY_WORKER_ORPHAN_AFTER_S="4",
        )
        headers = {"Authorization": f"Bearer {KEY}"}
        with (
            WorkerProcess(env, workdir / "worker.log", concurrency=2),
            httpx.Client(base_url=api.url, headers=headers, timeout=30) as client,
        ):
            items = [{"id": str(i), "question": f"Capital of France? [b{i}]"} for i in range(batch_items)]
            batch = client.post("/v1/batches", json={"items": items, "config": {"knowledge": "none"}})
            batch.raise_for_status()
            batch_id = batch.json()["batch_id"]
            deadline = time.monotonic() + 90
            while client.get(f"/v1/batches/{batch_id}").json()["counts"]["completed"] < 3:
                if time.monotonic() > deadline:
                    raise RuntimeError("the batch made no progress before the failover")
                time.sleep(0.1)
            spec = RedisSpec("probe", group.url, sentinel_master=group.master)
            probe, submitter = _Probe(spec, wait), _Submitter(api.url)
            probe.start()
            submitter.start()
            time.sleep(1.0)
            if lag_s > 0:
                group.hold_replication()
                time.sleep(lag_s)
            killed_at = time.monotonic()
            old = group.kill_primary()
            new = group.wait_failover(old)
            outcome.failover_s = time.monotonic() - killed_at
            time.sleep(2.0)  # writes and submissions go on against the new primary
            probe.stop.set()
            submitter.stop.set()
            probe.join(timeout=10)
            submitter.join(timeout=15)
            ids = [row["job_id"] for row in _batch_rows(client, batch_id, timeout_s)]
            outcome.accepted = ids + submitter.accepted
            _settle(client, outcome, timeout_s)
            _check_writes(group, new, probe, outcome)
            _check_events(group, new, outcome)
    outcome.rerun_calls = {k: n - CALLS_PER_DEBATE for k, n in served.items() if n > CALLS_PER_DEBATE}


def _batch_rows(client: httpx.Client, batch_id: str, timeout_s: float) -> list[dict[str, Any]]:
    """The batch's jobs (through 503s while the gateway reconnects)."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = client.get(f"/v1/batches/{batch_id}/results")
        if resp.status_code == 200:
            return [json.loads(line) for line in resp.text.splitlines() if line.strip()]
        if time.monotonic() > deadline:
            raise RuntimeError(f"batch {batch_id} unreadable: {resp.status_code} {resp.text[:200]}")
        time.sleep(0.3)


def _settle(client: httpx.Client, outcome: FailoverOutcome, timeout_s: float) -> None:
    """Wait for every accepted job to end (or to be found missing); sort them."""
    pending = set(outcome.accepted)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        for job_id in sorted(pending):
            code, body = _status(client, job_id)
            if code == 404:
                outcome.lost.append(job_id)
                pending.discard(job_id)
            elif code == 200 and body.get("status") == "completed":
                outcome.completed += 1
                pending.discard(job_id)
            elif code == 200 and body.get("status") in ("failed", "cancelled"):
                outcome.failed[job_id] = str(body.get("error"))
                pending.discard(job_id)
        time.sleep(0.5)
    outcome.unfinished = sorted(pending)


def _check_writes(group: SentinelGroup, new: int, probe: _Probe, outcome: FailoverOutcome) -> None:
    client = group.client(new)
    try:
        present = {int(x) for x in client.lrange("failover:probe", 0, -1)}
    finally:
        client.close()
    outcome.writes_acked = len(probe.acked)
    outcome.writes_lost = sum(1 for n in probe.acked if n not in present)
    outcome.writes_refused = probe.refused


def _check_events(group: SentinelGroup, new: int, outcome: FailoverOutcome) -> None:
    """Each job's event types as the store keeps them (packed into a finished job's record)."""
    client = group.client(new)
    try:
        for job_id in outcome.accepted:
            packed = client.hget(f"parley:job:{job_id}", "events_z")
            if packed:
                types = [e.type for e in unpack_events(str(packed))]
            else:
                types = [f.get("type", "") for _, f in client.xrange(f"parley:job:{job_id}:events")]
            if types.count("job.completed") > 1:
                outcome.completed_twice.append(job_id)
            if "job.restored" in types:
                outcome.restored.append(job_id)
    finally:
        client.close()

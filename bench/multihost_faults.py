"""The multi-host harness's faults, one at a time under a steady load of debates, each ended by the time
the service takes to recover once the link heals:

- ``worker_redis``: worker-2 cut from Redis (the broker and the job store) while it runs jobs;
- ``worker_llm``: worker-2 cut from the LLM server;
- ``worker_retriever``: worker-2 cut from the retriever;
- ``gateway_redis``: the gateway cut from Redis while clients submit (retrying with the same
  ``Idempotency-Key``) and stream events (resuming with ``Last-Event-ID``); every answer a client gets
  during the cut is recorded: it must be a 503 with ``Retry-After``, within ``HANG_S``;
- ``slow_link``: seconds of delay (the proxy) and dropped packets (iptables) on every link of worker-1.

A cut blackholes packets (iptables DROP on the cut host), so connections hang as across a real
partition instead of being refused. The load submits with an ``Idempotency-Key`` per debate and
retries on 503 or a broken connection as a client should, honouring ``Retry-After``, so no debate a
client asked for goes unaccounted; every 2xx answer for one key must name the same job.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.multihost_net import Network
from bench.multihost_stack import SLOWED, WORKERS, MultihostStack
from bench.soak_ledger import SINGLE_CONFIG, TERMINAL, GatewayClient, Job, Ledger, question
from services.jobstore import TERMINAL_EVENTS

FAULTS = ("worker_redis", "worker_llm", "worker_retriever", "gateway_redis", "slow_link")
CUT_PEER = {"worker_redis": "redis", "worker_llm": "llm", "worker_retriever": "retriever"}
VICTIM = WORKERS[1]  # the worker the cuts isolate; worker-1 keeps the service going meanwhile
HANG_S = 10.0  # a client's answer during a cut must come within this: more is a hang
KEYS_LOADED = ("alice", "bob", "carol")


@dataclass
class FaultOptions:
    """How long each fault lasts and how hard the load and the slow link are."""

    redis_cut_s: float = 30.0  # worker_redis
    cut_s: float = 15.0  # the other worker cuts and the slow link
    gateway_cut_s: float = 20.0  # gateway_redis
    delay_s: float = 1.0  # slow_link: added to each chunk, each way
    drop: float = 0.05  # slow_link: share of packets dropped, each way
    submit_every_s: float = 1.0
    burst: int = 6  # debates submitted at once as a fault starts, so the cut host is busy
    drain_s: float = 180.0  # how long the jobs may take to end after the heal


@dataclass
class Submission:
    """One debate a client asked for under one ``Idempotency-Key``: every answer it got, and the job."""

    tag: str
    answers: list[dict[str, Any]] = field(default_factory=list)
    job_ids: set[str] = field(default_factory=set)


def answer_of(resp: httpx.Response | None, exc: Exception | None, took: float) -> dict[str, Any]:
    """What a client saw: the status and ``Retry-After`` (or the transport error), and how long it took."""
    row: dict[str, Any] = {"s": round(took, 2)}
    if resp is None:
        row["error"] = type(exc).__name__
    else:
        row["status"] = resp.status_code
        row["retry_after"] = resp.headers.get("retry-after")
    return row


class Load:
    """Single debates (through the retriever) from three keys, one every ``submit_every_s``, each
    submitted until accepted with its own ``Idempotency-Key``; the jobs go into the soak's ledger."""

    def __init__(self, gw: GatewayClient, ledger: Ledger, every_s: float, kind: str) -> None:
        self.gw = gw
        self.ledger = ledger
        self.every_s = every_s
        self.kind = kind
        self.stop = threading.Event()
        self.jobs: list[Job] = []
        self.submissions: list[Submission] = []
        self._threads: list[threading.Thread] = []

    def submit_in_thread(self, key: str) -> Submission:
        """``submit`` in a thread of its own (``finish`` waits for it); its record, at once."""
        sub = Submission(self.ledger.tag(key))
        self.submissions.append(sub)
        t = threading.Thread(target=self.submit, args=(key,), kwargs={"sub": sub}, daemon=True)
        t.start()
        self._threads.append(t)
        return sub

    def submit(self, key: str, *, deadline_s: float = 300.0, sub: Submission | None = None) -> Job | None:
        """POST one debate until a 2xx, retrying 503s (after ``Retry-After``) and broken connections
        with the same ``Idempotency-Key``; then once more, to see the same job named again."""
        if sub is None:
            sub = Submission(self.ledger.tag(key))
            self.submissions.append(sub)
        tag = sub.tag
        body = {"question": question(tag), "config": SINGLE_CONFIG}
        headers = {"Idempotency-Key": f"mh-{tag}"}
        job = Job(key, tag, self.kind, submitted_at=time.monotonic() - self.ledger.t0)
        end = time.monotonic() + deadline_s
        accepted = 0
        while time.monotonic() < end and accepted < 2:
            started = time.monotonic()
            resp, exc = None, None
            try:
                resp = self.gw.clients[key].post("/v1/debates", json=body, headers=headers)
            except httpx.HTTPError as e:
                exc = e
            sub.answers.append(answer_of(resp, exc, time.monotonic() - started))
            sub.answers[-1]["t"] = time.monotonic() - self.ledger.t0
            if resp is not None and resp.status_code < 300:
                sub.job_ids.add(resp.json()["job_id"])
                accepted += 1
                continue
            wait = float(resp.headers.get("retry-after", 1)) if resp is not None else 1.0
            time.sleep(min(wait, 5.0))
        if not sub.job_ids:
            return None
        job.job_id = sorted(sub.job_ids)[0]
        self.ledger.add(job)
        self.jobs.append(job)
        return job

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.submit_in_thread(KEYS_LOADED[i % 3])
            i += 1
            self.stop.wait(self.every_s)

    def start(self, burst: int = 0) -> Load:
        """Submit ``burst`` debates at once (enough to fill every worker's processes), then one every
        ``every_s``."""
        for i in range(burst):
            self.submit_in_thread(KEYS_LOADED[i % 3])
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def finish(self, timeout_s: float = 300) -> None:
        """Stop submitting; wait for the submissions still retrying."""
        self.stop.set()
        end = time.monotonic() + timeout_s
        for t in list(self._threads):
            t.join(timeout=max(0.1, end - time.monotonic()))


def read_stream(
    client: httpx.Client, job_id: str, last_id: str | None, *, timeout_s: float = 60
) -> dict[str, Any]:
    """One connection to a job's event stream (resuming after ``last_id``): its answer, the event ids
    and types read, whether the terminal event came and how the connection ended."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    out: dict[str, Any] = {"ids": [], "types": [], "terminal": False}
    started = time.monotonic()
    try:
        with client.stream("GET", f"/v1/debates/{job_id}/events", headers=headers, timeout=timeout_s) as resp:
            out.update(answer_of(resp, None, time.monotonic() - started))
            if resp.status_code != 200:
                resp.read()
                return out
            event_id = None
            for line in resp.iter_lines():
                if line.startswith("retry:"):
                    out["retry_ms"] = int(line[6:].strip())
                elif line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                    out["ids"].append(event_id)
                    out["types"].append(kind)
                    if kind in TERMINAL_EVENTS:
                        out["terminal"] = True
            out["ended"] = "closed"
    except httpx.HTTPError as exc:
        out["ended"] = type(exc).__name__
        out.setdefault("error", type(exc).__name__)
    out["took_s"] = round(time.monotonic() - started, 2)
    return out


class StreamWatcher:
    """A client following one job's events across a cut: it reconnects with ``Last-Event-ID`` after
    each broken or refused connection (waiting ``Retry-After``) until the terminal event."""

    def __init__(self, client: httpx.Client, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.connections: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.types: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        end = time.monotonic() + 400
        while time.monotonic() < end:
            got = read_stream(self.client, self.job_id, self.ids[-1] if self.ids else None)
            self.connections.append({k: v for k, v in got.items() if k not in ("ids", "types")})
            self.ids += got["ids"]
            self.types += got["types"]
            if got["terminal"]:
                return
            # As an EventSource would: the stream's own ``retry`` (ms), else the 503's Retry-After.
            wait = got["retry_ms"] / 1000 if "retry_ms" in got else float(got.get("retry_after") or 1)
            time.sleep(min(wait, 5.0))

    def check(self) -> dict[str, Any]:
        """The stream as the client pieced it together against one full replay from the start."""
        full = read_stream(self.client, self.job_id, None)
        return {
            "connections": len(self.connections),
            "reconnects_refused": sum(1 for c in self.connections if c.get("status") == 503),
            "events": len(self.ids),
            "terminal": bool(self.types) and self.types[-1] in TERMINAL_EVENTS,
            "duplicates": len(self.ids) - len(set(self.ids)),
            "same_as_full_replay": self.ids == full["ids"],
            "how_connections_ended": [c.get("ended") or c.get("status") for c in self.connections],
            "broken": sum(1 for c in self.connections if c.get("ended") not in (None, "closed")),
        }


class FaultRunner:
    """Runs one fault under load and records it (``run``)."""

    def __init__(self, stack: MultihostStack, net: Network, gw: GatewayClient, opts: FaultOptions) -> None:
        self.stack = stack
        self.net = net
        self.gw = gw
        self.ledger = stack.ledger
        self.opts = opts
        self.cut_jobs: set[str] = set()  # jobs a cut host was running: a call cut keeps its worst case
        self.probe_finished: float | None = None  # when the last probe's debate ended (epoch s)

    def wait_running(self, worker: int, timeout_s: float = 20) -> list[str]:
        """The jobs worker ``worker`` runs, once it runs at least one (or ``timeout_s`` passed)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            running = self.stack.jobs_running_on(worker)
            if running:
                return running
            time.sleep(0.2)
        return []

    def probe(self, timeout_s: float) -> float | None:
        """Seconds until a debate submitted now completes; None if it does not within ``timeout_s``."""
        started = time.monotonic()
        load = Load(self.gw, self.ledger, 1.0, "probe")
        job = load.submit("ops", deadline_s=timeout_s)
        if job is None:
            return None
        left = timeout_s - (time.monotonic() - started)
        if self.gw.wait_terminal(job, left) is None or job.status != "completed":
            return None
        self.probe_finished = self.stack.finished_at([job.job_id])[job.job_id]
        return time.monotonic() - started

    def run(self, kind: str, repeat: int) -> dict[str, Any]:
        """The fault under load: the cut (or slow link) for its length, the heal, then the wait for
        every job to end and a new debate to complete. Its record."""
        o = self.opts
        record: dict[str, Any] = {
            "kind": kind,
            "repeat": repeat,
            "at_s": round(time.monotonic() - self.ledger.t0, 1),
        }
        load = Load(self.gw, self.ledger, o.submit_every_s, kind).start(o.burst)
        victim = WORKERS.index(SLOWED if kind == "slow_link" else VICTIM)
        record["running_at_cut"] = len(self.wait_running(victim))
        length = {"worker_redis": o.redis_cut_s, "gateway_redis": o.gateway_cut_s}.get(kind, o.cut_s)
        record["cut_s"] = length
        client_view: dict[str, Any] = {}
        watcher: StreamWatcher | None = None
        if kind in CUT_PEER:
            cut = set(self.stack.jobs_running_on(victim))
            self.net.cut(VICTIM, CUT_PEER[kind])
            time.sleep(length)
            with contextlib.suppress(Exception):  # the worker's record may be unreadable: it is cut
                cut.update(self.stack.jobs_running_on(victim))
            self.net.heal(VICTIM, CUT_PEER[kind])
            record["jobs_on_the_cut_host"] = sorted(cut)
            self.cut_jobs |= cut
        elif kind == "gateway_redis":
            streamed = load.submit("ops")
            assert streamed is not None, "no debate to stream"
            watcher = StreamWatcher(self.gw.clients["ops"], streamed.job_id)
            watcher.thread.start()
            time.sleep(0.3)  # the stream is open (and has read the first events) before the cut
            self.net.cut("gateway", "redis")
            client_view = self.during_gateway_cut(load, streamed.job_id, length)
            self.net.heal("gateway", "redis")
        elif kind == "slow_link":
            record["jobs_on_the_cut_host"] = self.stack.jobs_running_on(victim)
            self.cut_jobs.update(record["jobs_on_the_cut_host"])
            for proxy in self.stack.proxies.values():
                proxy.delay_s = o.delay_s
            self.net.lossy(SLOWED, "link", o.drop)
            time.sleep(length)
            self.net.lossy(SLOWED, "link", o.drop, on=False)
            for proxy in self.stack.proxies.values():
                proxy.delay_s = 0.0
            record.update(delay_s=o.delay_s, drop=o.drop)
        healed, healed_wall = time.monotonic(), time.time()
        time.sleep(2)  # submissions right after the heal count too
        load.finish(timeout_s=o.drain_s)
        probe_s = self.probe(o.drain_s)
        end = healed + o.drain_s
        while time.monotonic() < end and any(j.status not in TERMINAL for j in load.jobs):
            for job in load.jobs:
                if job.status not in TERMINAL:
                    self.gw.refresh(job)
            time.sleep(0.5)
        # Recovery: from the heal until the last of the fault's jobs ended (as its worker recorded it)
        # and a debate submitted after the heal completed.
        finished = self.stack.finished_at([j.job_id for j in load.jobs])
        all_ended = all(j.status in TERMINAL for j in load.jobs) and None not in finished.values()
        last_end = max((t for t in finished.values() if t is not None), default=healed_wall)
        if all_ended and probe_s is not None:
            probe_end = self.probe_finished or healed_wall
            record["recovery_s"] = round(max(0.0, max(last_end, probe_end) - healed_wall), 1)
        else:
            record["recovery_s"] = None
        record["probe_s"] = None if probe_s is None else round(probe_s, 1)
        record["job_ids"] = [j.job_id for j in load.jobs]
        record["submissions"] = submission_summary(load.submissions)
        if watcher is not None:
            watcher.thread.join(timeout=o.drain_s)
            record["stream"] = watcher.check()
            record["stream"]["during_cut"] = [c for c in watcher.connections if c.get("status") != 200]
        if client_view:
            record["client_view"] = client_view
        print(f"[multihost] {kind} #{repeat}: {json.dumps(brief(record))}", flush=True)
        return record

    def during_gateway_cut(self, load: Load, job_id: str, length: float) -> dict[str, Any]:
        """Ask the gateway what clients would while it cannot reach Redis, for ``length`` seconds, each
        in a thread of its own and again after each answer: a job's status, a new event stream, and a
        new debate (``Idempotency-Key``, submitted until accepted: after the heal it must be accepted
        once and the repeat must name the same job). Every answer that came before the heal."""
        client = self.gw.clients["ops"]
        seen: dict[str, list[dict[str, Any]]] = defaultdict(list)
        end = time.monotonic() + length

        def ask(what: str) -> None:
            while time.monotonic() < end - 1:
                started = time.monotonic()
                if what == "status":
                    resp, exc = None, None
                    try:
                        resp = client.get(f"/v1/debates/{job_id}", timeout=HANG_S * 3)
                    except httpx.HTTPError as e:
                        exc = e
                    row = answer_of(resp, exc, time.monotonic() - started)
                else:
                    got = read_stream(client, job_id, "0-0", timeout_s=HANG_S * 3)
                    row = {k: v for k, v in got.items() if k in ("status", "retry_after", "s", "error")}
                if time.monotonic() < end:
                    seen[what].append(row)
                time.sleep(0.5)

        submitted = load.submit_in_thread("ops")
        for what in ("status", "new stream"):
            threading.Thread(target=ask, args=(what,), daemon=True).start()
        time.sleep(max(0.0, end - time.monotonic()))
        heal_t = time.monotonic() - self.ledger.t0
        seen["submit"] = [a for a in list(submitted.answers) if a["t"] < heal_t]
        return dict(seen)


def submission_summary(subs: list[Submission]) -> dict[str, Any]:
    """How the load's submissions went: answers by status, and any key that named two jobs."""
    statuses: dict[str, int] = defaultdict(int)
    for sub in subs:
        for a in sub.answers:
            statuses[str(a.get("status", a.get("error")))] += 1
    return {
        "debates": len(subs),
        "accepted": sum(1 for s in subs if s.job_ids),
        "answers_by_status": dict(statuses),
        "retried": sum(1 for s in subs if len(s.answers) > 2),
        "keys_naming_two_jobs": [s.tag for s in subs if len(s.job_ids) > 1],
        "slowest_answer_s": max((a["s"] for s in subs for a in s.answers), default=None),
    }


def brief(record: dict[str, Any]) -> dict[str, Any]:
    """The progress line's fields."""
    keep = ("cut_s", "running_at_cut", "recovery_s", "probe_s")
    out = {k: record.get(k) for k in keep}
    out["jobs"] = len(record.get("job_ids", []))
    out["submit_answers"] = record["submissions"]["answers_by_status"]
    return out

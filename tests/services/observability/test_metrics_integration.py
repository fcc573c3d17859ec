"""``GET /metrics`` of the gateway and the worker after real debates: the counters moved by exactly what
happened.

Real processes: redis-server, the API under uvicorn, a Celery worker with two prefork processes (its
metrics summed over both through prometheus-client's multiprocess files), the scripted LLM. Counters
are process-global and other tests may run first, so each assertion is on the difference between a
scrape before and one after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter as Tally
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.guards import hash_key
from api.settings import ApiSettings
from tests.api.support import (
    ROOT,
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    wait_status,
    worker_env,
)
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "metrics-test-key"
# The gateway serves /metrics on its API port only to scrapes with this token.
METRICS_TOKEN = "metrics-scrape-token"
OWNER = "metrics-owner"
NO_KNOWLEDGE = {"knowledge": "none"}
LLM_SECRET = "sk-metrics-test-0123456789abcdef"

LabelKey = tuple[str, frozenset[tuple[str, str]]]


class Scrape:
    """One parsed ``/metrics`` response: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[LabelKey, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    @classmethod
    def get(cls, url: str) -> Scrape:
        # The gateway asks for the metrics token; the worker's and retriever's ports ignore it.
        resp = httpx.get(url, timeout=10, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/plain")
        return cls(resp.text)

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def delta(self, before: Scrape, name: str, **labels: str) -> float:
        return self.value(name, **labels) - before.value(name, **labels)


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(latency_s=0.05) as server:
        script_agreeing(server)
        yield server


@pytest.fixture(scope="module")
def api(redis_server: RedisServer) -> Iterator[ApiServer]:
    settings = ApiSettings(
        redis_url=redis_server.url, keys={OWNER: hash_key(KEY)}, metrics_token=METRICS_TOKEN, metrics_port=0
    )
    with ApiServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def worker_metrics(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WorkerProcess, str, Path]]:
    port = free_port()
    metrics_dir = tmp_path_factory.mktemp("worker-metrics")
    (metrics_dir / "counter_999999.db").write_bytes(b"stale")  # a previous run's file: must be wiped
    env = worker_env(
        redis_server.url,
        llm.base_url,
        PARLEY_WORKER_METRICS_PORT=str(port),
        PARLEY_WORKER_METRICS_HOST="127.0.0.1",
        PARLEY_WORKER_METRICS_DIR=str(metrics_dir),
        PARLEY_LLM_MAX_ATTEMPTS="1",
        PARLEY_LOG_FORMAT="json",
        PARLEY_LLM_API_KEY=LLM_SECRET,
    )
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with WorkerProcess(env, log, concurrency=2) as proc:
        yield proc, f"http://127.0.0.1:{port}/metrics", metrics_dir


@pytest.fixture
def client(api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
        yield c


def test_worker_metrics_sum_both_pool_processes_after_two_debates(
    api: ApiServer,
    worker_metrics: tuple[WorkerProcess, str, Path],
    client: httpx.Client,
    llm: ScriptedLLM,
) -> None:
    _, worker_url, metrics_dir = worker_metrics
    assert not (metrics_dir / "counter_999999.db").exists()
    gateway_url = f"{api.url}/metrics"
    gw0, wk0 = Scrape.get(gateway_url), Scrape.get(worker_url)

    # Two debates at once: with two pool processes and prefetch 1, each process takes one.
    job_ids = [
        client.post("/v1/debates", json={"question": q, "config": NO_KNOWLEDGE}).json()["job_id"]
        for q in ("What is the capital of France?", "Which city is the capital of France?")
    ]
    jobs = [wait_status(client, j, {"completed", "failed"}) for j in job_ids]
    assert [j["status"] for j in jobs] == ["completed", "completed"], jobs
    gw1, wk1 = Scrape.get(gateway_url), Scrape.get(worker_url)

    # Gateway: the two POSTs by route template and status, and the polling GETs.
    assert gw1.delta(gw0, "parley_http_requests_total", route="/v1/debates", method="POST", status="202") == 2
    polls = gw1.delta(gw0, "parley_http_requests_total", route="/v1/debates/{job_id}", method="GET")
    assert polls >= 2
    assert gw1.value("parley_queue_depth", queue="parley.interactive") == 0
    assert ("parley_queue_depth", frozenset({("queue", "parley.batch")})) in gw1.samples

    # Worker: jobs, their time in the queue and in the worker, rounds.
    assert wk1.delta(wk0, "parley_jobs_total", status="completed", queue="parley.interactive") == 2
    assert wk1.delta(wk0, "parley_job_duration_seconds_count", status="completed") == 2
    assert wk1.delta(wk0, "parley_job_queue_seconds_count", queue="parley.interactive") == 2
    rounds = sum(j["result"]["rounds"] for j in jobs)
    assert wk1.delta(wk0, "parley_debate_rounds_count", protocol="madke") == 2
    assert wk1.delta(wk0, "parley_debate_rounds_sum", protocol="madke") == rounds

    # LLM calls and tokens by role equal what the transcripts recorded, call for call.
    records = [r for j in jobs for r in j["result"]["transcript"]]
    calls_by_role = Tally(r["role"] for r in records)
    for role, n in calls_by_role.items():
        assert wk1.delta(wk0, "parley_llm_calls_total", role=role, model="scripted") == n, role
        prompt = sum(r["prompt_tokens"] for r in records if r["role"] == role)
        completion = sum(r["completion_tokens"] for r in records if r["role"] == role)
        assert wk1.delta(wk0, "parley_llm_tokens_total", role=role, kind="prompt") == prompt
        assert wk1.delta(wk0, "parley_llm_tokens_total", role=role, kind="completion") == completion
    assert wk1.delta(wk0, "parley_llm_call_seconds_count") == len(records)
    # The endpoint label is the configured name, never the URL.
    assert wk1.delta(wk0, "parley_llm_calls_total", endpoint="debater") >= 2
    assert "127.0.0.1" not in wk1.text and llm.base_url not in wk1.text
    total_tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in records)
    assert wk1.delta(wk0, "parley_job_tokens_total", key=OWNER) == total_tokens

    # Both pool processes (and only this run's) wrote their own files.
    assert len(list(metrics_dir.glob("counter_*.db"))) >= 2


def test_failed_job_counts_a_failure_and_one_llm_error(
    api: ApiServer,
    worker_metrics: tuple[WorkerProcess, str, Path],
    client: httpx.Client,
    llm: ScriptedLLM,
) -> None:
    _, worker_url, _ = worker_metrics
    wk0 = Scrape.get(worker_url)
    # One call at a time, one attempt per call: the first call's 500 fails the job.
    llm.fail_next(500, count=1)
    config = {**NO_KNOWLEDGE, "sequential": True}
    job_id = client.post("/v1/debates", json={"question": "Will this fail?", "config": config}).json()[
        "job_id"
    ]
    job = wait_status(client, job_id, {"completed", "failed"})
    assert job["status"] == "failed", job
    wk1 = Scrape.get(worker_url)
    assert wk1.delta(wk0, "parley_jobs_total", status="failed", queue="parley.interactive") == 1
    assert wk1.delta(wk0, "parley_jobs_total", status="completed") == 0
    assert wk1.delta(wk0, "parley_job_duration_seconds_count", status="failed") == 1
    assert wk1.delta(wk0, "parley_llm_errors_total", error="LLMServerError", endpoint="debater") == 1
    assert wk1.delta(wk0, "parley_llm_calls_total") == 0
    assert wk1.delta(wk0, "parley_debate_rounds_count") == 0


def test_worker_logs_are_json_lines_naming_job_and_batch(
    worker_metrics: tuple[WorkerProcess, str, Path], client: httpx.Client
) -> None:
    worker, _, _ = worker_metrics
    items = [
        {"id": "a", "question": "What is the capital of Italy?"},
        {"id": "b", "question": "And of Spain?"},
    ]
    accepted = client.post("/v1/batches", json={"items": items, "config": NO_KNOWLEDGE})
    assert accepted.status_code == 202, accepted.text
    batch_id = accepted.json()["batch_id"]
    deadline = time.monotonic() + 60
    while client.get(f"/v1/batches/{batch_id}").json().get("status") != "completed":
        assert time.monotonic() < deadline, "batch did not complete"
        time.sleep(0.1)
    rows = [json.loads(line) for line in client.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    job_ids = {row["job_id"] for row in rows}
    assert len(job_ids) == 2
    time.sleep(0.5)  # the last lines of the second job

    text = worker.log()
    lines = [line for line in text.splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= set(e) for e in entries)
    assert any(" ready." in e["message"] for e in entries)
    mine = [e for e in entries if e.get("job_id") in job_ids]
    # Each job's own lines (its end, and Celery's line on the task's result) carry its id and its
    # batch's id.
    assert {e["job_id"] for e in mine if e["message"].endswith("ended: completed")} == job_ids
    assert {e["job_id"] for e in mine if e["logger"] == "celery.app.trace"} == job_ids
    assert all(e["batch_id"] == batch_id for e in mine)
    # A line that names a job of the batch in its text is tagged with that job.
    for e in entries:
        named = [j for j in job_ids if j in e["message"]]
        if named:
            assert e.get("job_id") == named[0], e
    # Secrets never reach the log: the LLM key was sent on every call.
    assert LLM_SECRET not in text


def test_rate_limit_refusals_are_counted_per_key_owner(redis_server: RedisServer) -> None:
    # A gateway of its own whose limit is reached at once (the other tests' gateway is not limited).
    settings = ApiSettings(
        redis_url=redis_server.url,
        keys={OWNER: hash_key(KEY)},
        rate_limit_per_minute=3,
        key_prefix="rl",
        metrics_token=METRICS_TOKEN,
        metrics_port=0,
    )
    with (
        ApiServer(settings) as limited,
        httpx.Client(base_url=limited.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c,
    ):
        url = f"{limited.url}/metrics"
        before = Scrape.get(url)
        statuses = [c.get("/v1/debates/job_does_not_exist").status_code for _ in range(8)]
        refused = statuses.count(429)
        assert refused >= 2, statuses  # 3 pass per window; even if a window turns, 2 of 8 are refused
        after = Scrape.get(url)
    assert after.delta(before, "parley_refusals_total", reason="rate_limit", key=OWNER) == refused
    assert after.delta(before, "parley_http_requests_total", status="429") == refused
    assert KEY not in after.text and hash_key(KEY) not in after.text


def test_a_second_worker_on_a_taken_metrics_port_still_runs(
    redis_server: RedisServer,
    llm: ScriptedLLM,
    worker_metrics: tuple[WorkerProcess, str, Path],
    tmp_path: Path,
) -> None:
    _, worker_url, _ = worker_metrics
    port = worker_url.rsplit(":", 1)[1].split("/")[0]
    env = worker_env(
        redis_server.url,
        llm.base_url,
        PARLEY_WORKER_METRICS_PORT=port,
        PARLEY_WORKER_METRICS_HOST="127.0.0.1",
    )
    with WorkerProcess(env, tmp_path / "second.log", concurrency=1, name="w2") as second:
        assert "not served on port" in second.log()
    # The first worker's endpoint is untouched.
    assert "parley_jobs_total" in Scrape.get(worker_url).text


def test_gateway_with_two_uvicorn_workers_counts_every_request(redis_server: RedisServer) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {
            "PARLEY_API_REDIS_URL": redis_server.url,
            "PYTHONPATH": str(ROOT),
            "PARLEY_API_METRICS_TOKEN": METRICS_TOKEN,
            "PARLEY_API_METRICS_PORT": "0",
        }
    )
    args = [
        sys.executable,
        "-m",
        "api.cli",
        "api",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "2",
    ]
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.2)
        before = Scrape.get(f"{base}/metrics")
        with httpx.Client(base_url=base, timeout=10) as c:
            for _ in range(20):
                assert c.get("/healthz").status_code == 200
        # Whichever process answers a scrape, it reports both processes' requests.
        for _ in range(4):
            after = Scrape.get(f"{base}/metrics")
            assert after.delta(before, "parley_http_requests_total", route="/healthz", status="200") == 20
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_gateway_json_logs_include_uvicorn_lines(redis_server: RedisServer, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(
        {"PARLEY_API_REDIS_URL": redis_server.url, "PYTHONPATH": str(ROOT), "PARLEY_LOG_FORMAT": "json"}
    )
    log = tmp_path / "api.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    loggers = {e["logger"] for e in entries}
    assert {"uvicorn.error", "uvicorn.access"} <= loggers, loggers
    assert all(e["service"] == "api" for e in entries)
    assert any("/healthz" in e["message"] for e in entries if e["logger"] == "uvicorn.access")


def test_metrics_endpoint_itself_is_not_counted(api: ApiServer) -> None:
    url = f"{api.url}/metrics"
    before = Scrape.get(url)
    for _ in range(3):
        Scrape.get(url)
    time.sleep(0.05)
    after = Scrape.get(url)
    assert after.delta(before, "parley_http_requests_total", route="/metrics") == 0

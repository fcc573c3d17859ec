"""End to end: real redis-server, the API over HTTP, a real Celery worker process, the scripted LLM.

submit → poll → result; SSE read by an HTTP client and resumed with Last-Event-ID; a 50-item JSONL
batch in input order (also through ``parley submit --wait``); cancel; retriever down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import KEY_A
from tests.api.support import (
    JUDGE,
    ROOT,
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_echo,
    wait_status,
    worker_env,
)
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NO_KNOWLEDGE = {"knowledge": "none"}


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    with ClosedPort() as dead_retriever:  # nothing listens there
        env = worker_env(
            redis_server.url,
            llm.base_url,
            dead_retriever.url,
            PARLEY_RETRIEVER_CLIENT_MAX_ATTEMPTS="2",
            PARLEY_RETRIEVER_CLIENT_TIMEOUT_S="2",
        )
        log = tmp_path_factory.mktemp("worker") / "worker.log"
        with WorkerProcess(env, log, concurrency=2) as proc:
            yield proc


def read_sse(client: httpx.Client, path: str, last_event_id: str | None = None) -> list[dict[str, Any]]:
    """Read an SSE stream to its end; returns ``{id, event, data}`` dicts."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with client.stream("GET", path, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if not line:
                if "event" in current:
                    events.append(current)
                current = {}
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            current[field] = json.loads(value) if field == "data" else value
    return events


def test_submit_poll_result_and_sse(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    resp = alice.post(
        "/v1/debates", json={"question": "What is the capital of France?", "config": NO_KNOWLEDGE}
    )
    assert resp.status_code == 202
    job = wait_status(alice, resp.json()["job_id"], {"completed", "failed"})
    assert job["status"] == "completed", job
    result = job["result"]
    assert result["answer"] == "Paris"
    assert result["rounds"] == 1 and result["consensus"] is True
    assert result["usage"]["calls"] == 4  # 2 debaters, judge, summarizer (no knowledge: no selection)
    assert [r["role"] for r in result["transcript"]] == ["debater", "debater", "judge", "summarizer"]
    assert job["progress"]["round"] == 1 and job["attempts"] == 1

    events = read_sse(alice, f"/v1/debates/{job['job_id']}/events")
    types = [e["event"] for e in events]
    assert types[0] == "job.queued" and types[1] == "pool.ready" and types[-1] == "job.completed"
    assert types.count("turn.completed") == 4 and "round.completed" in types and "judge.verdict" in types
    ids = [tuple(int(p) for p in e["id"].split("-")) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # monotonically increasing
    assert events[-1]["data"]["answer"] == "Paris"

    # Resume after the third event: exactly the rest, nothing repeated.
    rest = read_sse(alice, f"/v1/debates/{job['job_id']}/events", last_event_id=events[2]["id"])
    assert [e["id"] for e in rest] == [e["id"] for e in events[3:]]
    # Resuming after the terminal event ends at once.
    assert read_sse(alice, f"/v1/debates/{job['job_id']}/events", last_event_id=events[-1]["id"]) == []


def test_sse_streams_live_progress(worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM) -> None:
    scripted.latency_s = 0.15
    job_id = alice.post(
        "/v1/debates", json={"question": "Capital of France?", "config": NO_KNOWLEDGE}
    ).json()["job_id"]
    started = time.monotonic()
    events = read_sse(alice, f"/v1/debates/{job_id}/events")  # connected while the job is queued
    assert time.monotonic() - started >= 0.3  # it really waited for the live events
    assert [e["event"] for e in events][-1] == "job.completed"


def test_batch_of_50_comes_back_in_order(
    worker: WorkerProcess, api: ApiServer, alice: httpx.Client, scripted: ScriptedLLM, tmp_path: Path
) -> None:
    scripted.reset()
    script_echo(scripted)
    words = [f"word{i:02d}" for i in range(50)]
    src = tmp_path / "batch.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": f"item-{i}", "question": f"Echo {w}?", "answers": [w]}) + "\n"
            for i, w in enumerate(words)
        )
    )
    out = tmp_path / "results.jsonl"
    env = {"PARLEY_API_URL": api.url, "PARLEY_API_KEY": KEY_A, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "api.cli", "submit", str(src), "--wait", "--poll", "0.3", "--out", str(out),
         "--config", json.dumps({**NO_KNOWLEDGE, "rounds": 2})],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "wrote 50 results" in proc.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"item-{i}" for i in range(50)]
    assert [r["index"] for r in rows] == list(range(50))
    assert all(r["status"] == "completed" and r["error"] is None for r in rows)
    assert [r["result"]["answer"] for r in rows] == words  # each item got its own answer
    assert [r["answers"] for r in rows] == [[w] for w in words]

    batch_id = json.loads(proc.stdout.splitlines()[0])["batch_id"]
    status = alice.get(f"/v1/batches/{batch_id}").json()
    assert status["status"] == "completed" and status["progress"] == 1.0
    assert status["counts"]["completed"] == 50 and status["total"] == 50


def test_cancel_running_job(worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM) -> None:
    scripted.latency_s = 0.1
    scripted.on(JUDGE, "They disagree. [No]")  # judge rules come before the agreeing one
    scripted.rules.insert(0, scripted.rules.pop())
    cfg = {**NO_KNOWLEDGE, "rounds": 10}
    job_id = alice.post("/v1/debates", json={"question": "Long debate?", "config": cfg}).json()["job_id"]
    job = wait_status(alice, job_id, {"debating"}, poll_s=0.05)
    deadline = time.monotonic() + 30
    while job["progress"]["round"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        job = alice.get(f"/v1/debates/{job_id}").json()
    resp = alice.post(f"/v1/debates/{job_id}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    calls_at_cancel = len(scripted.requests)
    time.sleep(1.5)  # the worker notices within 0.5 s and stops calling the LLM
    assert len(scripted.requests) - calls_at_cancel <= 3
    job = alice.get(f"/v1/debates/{job_id}").json()
    assert job["status"] == "cancelled" and job["result"] is None
    events = read_sse(alice, f"/v1/debates/{job_id}/events")
    assert events[-1]["event"] == "job.cancelled"
    assert "job.completed" not in [e["event"] for e in events]
    again = alice.post(f"/v1/debates/{job_id}/cancel")
    assert again.status_code == 200  # cancelling twice is harmless

    done = alice.post("/v1/debates", json={"question": "Quick?", "config": {**NO_KNOWLEDGE, "rounds": 1}})
    finished = wait_status(alice, done.json()["job_id"], {"completed"})
    conflict = alice.post(f"/v1/debates/{finished['job_id']}/cancel")
    assert conflict.status_code == 409 and conflict.headers["content-type"].startswith(
        "application/problem+json"
    )


def test_cancel_queued_batch_item_is_never_run(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    scripted.latency_s = 0.2
    items = [{"id": str(i), "question": f"Question {i}?"} for i in range(6)]
    batch_id = alice.post("/v1/batches", json={"items": items, "config": NO_KNOWLEDGE}).json()["batch_id"]
    cancelled = alice.post(f"/v1/batches/{batch_id}/cancel").json()
    assert cancelled["counts"]["cancelled"] >= 4  # two worker processes took at most two items
    deadline = time.monotonic() + 30
    while alice.get(f"/v1/batches/{batch_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    rows = [json.loads(x) for x in alice.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    for row in rows:
        assert (row["status"] == "cancelled") == (row["result"] is None)


def test_retriever_down_fails_job_with_clear_reason(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    job_id = alice.post(
        "/v1/debates", json={"question": "Needs knowledge?", "config": {"knowledge": "all"}}
    ).json()["job_id"]
    job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=60)
    assert job["status"] == "failed"
    assert "retriever" in job["error"].lower()
    assert job["result"] is None
    assert len([r for r in scripted.requests if "Needs knowledge?" in json.dumps(r)]) == 0  # no LLM call
    events = read_sse(alice, f"/v1/debates/{job_id}/events")
    assert events[-1]["event"] == "job.failed" and "retriever" in events[-1]["data"]["error"].lower()


def test_batch_does_not_starve_a_single_request(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    scripted.latency_s = 0.1  # ~0.3 s per debate: 16 queued items are ~2.4 s of work for 2 processes
    items = [{"id": str(i), "question": f"Batch question {i}?"} for i in range(16)]
    batch_id = alice.post("/v1/batches", json={"items": items, "config": NO_KNOWLEDGE}).json()["batch_id"]
    single = alice.post("/v1/debates", json={"question": "Single?", "config": NO_KNOWLEDGE}).json()["job_id"]
    done = wait_status(alice, single, {"completed"}, timeout_s=60)
    deadline = time.monotonic() + 60
    while alice.get(f"/v1/batches/{batch_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    rows = [json.loads(x) for x in alice.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    finished = [alice.get(f"/v1/debates/{r['job_id']}").json()["finished_at"] for r in rows]
    ahead = sum(f < done["finished_at"] for f in finished)
    # FIFO would run all 16 batch items first; the queues alternate, so only a few finish before it.
    assert ahead <= 6, f"{ahead} batch items finished before the single debate"


def test_a_debate_brings_its_own_pool(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    pool = [
        {"source": "web", "title": "Snippet", "text": "Paris has been the capital since 987."},
        {"source": "wikipedia", "title": "France", "text": "France's capital is Paris."},
        {"source": "wikipedia", "title": "Empty", "text": "   "},
    ]
    resp = alice.post("/v1/debates", json={"question": "Capital of France?", "pool": pool})
    assert resp.status_code == 202, resp.text
    job = wait_status(alice, resp.json()["job_id"], {"completed", "failed"})
    assert job["status"] == "completed", job
    items = job["result"]["pool"]["items"]
    # Wikipedia first, numbered from 1, the textless item dropped; no retriever was asked.
    assert [(it["n"], it["title"]) for it in items] == [(1, "France"), (2, "Snippet")]
    assert "cached" not in job["result"]["pool"]
    assert any("France's capital is Paris." in json.dumps(r) for r in scripted.requests)
    events = read_sse(alice, f"/v1/debates/{job['job_id']}/events")
    ready = next(e for e in events if e["event"] == "pool.ready")
    assert "1 given knowledge item(s) had no text" in ready["data"]["warnings"][0]
    assert "cached" not in ready["data"] and "timings_ms" not in ready["data"]
    # A pool the protocol would not use is refused, naming the field.
    bad = alice.post(
        "/v1/debates", json={"question": "Capital?", "pool": pool, "config": {"protocol": "single"}}
    )
    assert bad.status_code == 422 and "pool" in bad.json()["detail"]

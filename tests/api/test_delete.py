"""``DELETE /v1/debates/{id}`` and ``DELETE /v1/batches/{id}`` remove what they name, end to end.

Real redis-server, the API over HTTP, a real Celery worker process, the scripted LLM. A delete stops
a running job as a cancel does (the worker notices and stops calling the LLM), then removes its record,
result and events, so every later read is 404 and the listings no longer show it; a worker still
finishing it re-creates nothing. Another key's delete is a 404 that changes nothing. ``POST …/cancel``
keeps the record (tests/api/test_flow.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.support import JUDGE, RedisServer, WorkerProcess, wait_status, worker_env
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NO_KNOWLEDGE = {"knowledge": "none"}
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with WorkerProcess(worker_env(redis_server.url, llm.base_url), log, concurrency=2) as proc:
        yield proc


def assert_problem(resp: httpx.Response, status: int, type_: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = resp.json()
    assert body["status"] == status and body["detail"]
    if type_ is not None:
        assert body["type"] == type_, body
    return body


def job_keys(redis_server: RedisServer, job_id: str) -> set[str]:
    """Every Redis key of a job but its tombstone (what a delete must leave nothing of)."""
    r = redis_server.client()
    try:
        return {k for k in r.scan_iter(f"parley:job:{job_id}*") if not k.endswith(":deleted")}
    finally:
        r.close()


def listed(client: httpx.Client, path: str, field: str) -> set[str]:
    return {item[field] for item in client.get(path, params={"limit": 100}).json()["items"]}


def still_active(redis_server: RedisServer, job_ids: list[str]) -> list[str]:
    """The ids among ``job_ids`` that still hold one of alice's active-job slots."""
    r = redis_server.client()
    try:
        return [j for j in job_ids if r.sismember("parley:owner:alice:active", j)]
    finally:
        r.close()


def stored_bytes(client: httpx.Client) -> int:
    value: int = client.get("/v1/usage").json()["stored_bytes"]
    return value


def test_deleting_a_running_debate_stops_it_and_nothing_brings_it_back(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM, redis_server: RedisServer
) -> None:
    scripted.latency_s = 0.1
    scripted.on(JUDGE, "They disagree. [No]")  # judge rules come before the agreeing one
    scripted.rules.insert(0, scripted.rules.pop())
    job_id = alice.post(
        "/v1/debates", json={"question": "Long debate?", "config": {**NO_KNOWLEDGE, "rounds": 10}}
    ).json()["job_id"]
    job = wait_status(alice, job_id, {"debating"}, poll_s=0.05)
    deadline = time.monotonic() + 30
    while job["progress"]["round"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        job = alice.get(f"/v1/debates/{job_id}").json()

    resp = alice.delete(f"/v1/debates/{job_id}")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"id": job_id, "object": "debate.deleted", "deleted": True}
    calls_at_delete = len(scripted.requests)
    time.sleep(2.0)  # the worker notices within 0.5 s, stops calling the LLM, and its last calls settle
    assert len(scripted.requests) - calls_at_delete <= 3

    # Gone for every route, and nothing the worker wrote while stopping re-created it.
    assert_problem(alice.get(f"/v1/debates/{job_id}"), 404, "/problems/not-found")
    assert_problem(alice.get(f"/v1/debates/{job_id}/events"), 404)
    assert_problem(alice.post(f"/v1/debates/{job_id}/cancel"), 404)
    assert_problem(alice.delete(f"/v1/debates/{job_id}"), 404)  # deleting twice: nothing left to delete
    assert job_keys(redis_server, job_id) == set()
    assert job_id not in listed(alice, "/v1/debates", "job_id")
    assert still_active(redis_server, [job_id]) == []  # its slot is free


def test_deleting_a_finished_debate_removes_it_and_frees_its_storage(
    worker: WorkerProcess, alice: httpx.Client, redis_server: RedisServer
) -> None:
    question = "Which is the capital of France? " + "x" * 1500
    job_id = alice.post("/v1/debates", json={"question": question, "config": NO_KNOWLEDGE}).json()["job_id"]
    done = wait_status(alice, job_id, {"completed"})
    assert done["result"]["answer"]
    assert job_id in listed(alice, "/v1/debates", "job_id")
    before = stored_bytes(alice)

    resp = alice.delete(f"/v1/debates/{job_id}")
    assert resp.status_code == 200 and resp.json()["object"] == "debate.deleted"
    assert_problem(alice.get(f"/v1/debates/{job_id}"), 404)
    assert_problem(alice.delete(f"/v1/debates/{job_id}"), 404)
    assert job_id not in listed(alice, "/v1/debates", "job_id")
    assert job_keys(redis_server, job_id) == set()
    # Its record, question and result are no longer counted against the key's storage.
    assert before - stored_bytes(alice) > 8192 + 1500


def test_another_keys_delete_is_404_and_changes_nothing(
    worker: WorkerProcess, alice: httpx.Client, bob: httpx.Client
) -> None:
    job_id = alice.post("/v1/debates", json={"question": "Mine?", "config": NO_KNOWLEDGE}).json()["job_id"]
    batch_id = alice.post(
        "/v1/batches", json={"items": [{"question": "Mine too?"}], "config": NO_KNOWLEDGE}
    ).json()["batch_id"]
    not_found = assert_problem(bob.delete(f"/v1/debates/{job_id}"), 404, "/problems/not-found")
    # Another key's id reads exactly as an unknown one.
    unknown = assert_problem(bob.delete("/v1/debates/job_doesnotexist"), 404, "/problems/not-found")
    assert not_found["title"] == unknown["title"]
    assert_problem(bob.delete(f"/v1/batches/{batch_id}"), 404, "/problems/not-found")

    done = wait_status(alice, job_id, {"completed"})  # it ran to its end all the same
    assert done["result"] is not None
    assert alice.get(f"/v1/batches/{batch_id}").status_code == 200


def test_deleting_a_batch_removes_it_and_its_items(
    worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM, redis_server: RedisServer
) -> None:
    scripted.latency_s = 0.2
    items = [{"id": f"item-{i}", "question": f"Batch question {i}?"} for i in range(6)]
    accepted = alice.post("/v1/batches", json={"items": items, "config": NO_KNOWLEDGE})
    assert accepted.status_code == 202, accepted.text
    batch_id = accepted.json()["batch_id"]
    rows = alice.get(f"/v1/batches/{batch_id}/results").text.splitlines()
    job_ids = [json.loads(line)["job_id"] for line in rows]
    wait_status(alice, job_ids[0], {"retrieving", "debating", "completed"}, poll_s=0.05)
    # An item goes with its batch: it cannot be deleted on its own (it can be cancelled).
    assert_problem(alice.delete(f"/v1/debates/{job_ids[-1]}"), 409, "/problems/batch-item")
    assert batch_id in listed(alice, "/v1/batches", "batch_id")
    before = stored_bytes(alice)

    resp = alice.delete(f"/v1/batches/{batch_id}")  # some items running or done, the rest queued
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"id": batch_id, "object": "batch.deleted", "deleted": True}
    calls_at_delete = len(scripted.requests)
    time.sleep(2.0)  # running items stop; queued ones are never run (their workers find them gone)
    assert len(scripted.requests) - calls_at_delete <= 6

    assert_problem(alice.get(f"/v1/batches/{batch_id}"), 404)
    assert_problem(alice.get(f"/v1/batches/{batch_id}/results"), 404)
    assert_problem(alice.post(f"/v1/batches/{batch_id}/cancel"), 404)
    assert_problem(alice.delete(f"/v1/batches/{batch_id}"), 404)
    for job_id in job_ids:
        assert_problem(alice.get(f"/v1/debates/{job_id}"), 404)
        assert job_keys(redis_server, job_id) == set()
    assert batch_id not in listed(alice, "/v1/batches", "batch_id")
    assert not set(job_ids) & listed(alice, "/v1/debates", "job_id")
    r = redis_server.client()
    try:
        assert not r.exists(f"parley:batch:{batch_id}", f"parley:batch:{batch_id}:jobs")
    finally:
        r.close()
    assert before - stored_bytes(alice) > 5 * 8192
    assert still_active(redis_server, job_ids) == []


def test_a_replay_never_points_at_a_deleted_job(worker: WorkerProcess, alice: httpx.Client) -> None:
    """The ``Idempotency-Key`` response that created a deleted debate or batch is forgotten with it:
    the same request with that key creates a new one instead of answering with a gone ``Location``."""
    for path, body, field in (
        ("/v1/debates", {"question": "Once?", "config": NO_KNOWLEDGE}, "job_id"),
        ("/v1/batches", {"items": [{"question": "Once?"}], "config": NO_KNOWLEDGE}, "batch_id"),
    ):
        key = {"Idempotency-Key": f"delete-replay-{field}-{time.time_ns()}"}
        first = alice.post(path, json=body, headers=key)
        replay = alice.post(path, json=body, headers=key)
        assert replay.headers.get("idempotent-replayed") == "true"
        assert replay.json()[field] == first.json()[field]
        assert alice.delete(first.headers["location"]).status_code == 200

        again = alice.post(path, json=body, headers=key)
        assert again.status_code == 202 and "idempotent-replayed" not in again.headers
        assert again.json()[field] != first.json()[field]
        assert alice.get(again.headers["location"]).status_code == 200
        assert alice.post(path, json=body, headers=key).json()[field] == again.json()[field]

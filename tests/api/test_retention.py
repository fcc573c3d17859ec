"""A finished job reads the same through every API route after it was packed, for the retention the
operator set once (``PARLEY_JOB_TTL_S``) for the gateway and the worker alike.

Real redis-server, the API over HTTP, a real Celery worker process started with ``PARLEY_JOB_TTL_S``
in its environment, the scripted LLM. A debate and a batch are read right after they finished (their
event streams still there) and again once the streams have lapsed (deleted here, as their one-minute
grace would): result and transcript, the SSE replay from the start and from a ``Last-Event-ID``, the
batch's status and results, the listings: all the same. Every key of theirs expires within the
retention, the worker's last write included; no checkpoint or lease is left behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.jobstore.settings import RetentionSettings
from tests.api.conftest import KEY_A, api_settings
from tests.api.support import ApiServer, RedisServer, WorkerProcess, wait_status, worker_env
from tests.api.test_flow import read_sse
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TTL_S = 600
PASSAGE = ("Paris is the capital and most populous city of France, on the Seine. " * 10)[:700]
POOL = [{"title": f"Paris {i}", "text": PASSAGE, "source": "wikipedia"} for i in range(3)]


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer) -> Iterator[ApiServer]:
    with ApiServer(api_settings(redis_server.url), RetentionSettings(job_ttl_s=TTL_S)) as server:
        yield server


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    env = worker_env(redis_server.url, llm.base_url, PARLEY_JOB_TTL_S=str(TTL_S))
    with WorkerProcess(env, tmp_path_factory.mktemp("worker") / "worker.log", concurrency=2) as proc:
        yield proc


@pytest.fixture
def client(gateway: ApiServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY_A}"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as c:
        yield c


def everything(client: httpx.Client, job_id: str, batch_id: str) -> dict[str, Any]:
    """What the API answers about a finished debate and a finished batch."""
    events = read_sse(client, f"/v1/debates/{job_id}/events")
    batch = client.get(f"/v1/batches/{batch_id}").json()
    batch.pop("updated_at", None)
    return {
        "job": client.get(f"/v1/debates/{job_id}").json(),
        "events": events,
        "resumed": read_sse(client, f"/v1/debates/{job_id}/events", last_event_id=events[2]["id"]),
        "after_end": read_sse(client, f"/v1/debates/{job_id}/events", last_event_id=events[-1]["id"]),
        "batch": batch,
        "results": [
            json.loads(line) for line in client.get(f"/v1/batches/{batch_id}/results").text.splitlines()
        ],
        "listed": [j["job_id"] for j in client.get("/v1/debates", params={"limit": 50}).json()["items"]],
        "batches": [b["batch_id"] for b in client.get("/v1/batches").json()["items"]],
    }


def test_a_finished_debate_and_batch_read_the_same_before_and_after_packing(
    worker: WorkerProcess, client: httpx.Client, redis_server: RedisServer
) -> None:
    job_id = client.post(
        "/v1/debates",
        json={
            "question": "What is the capital of France?",
            "config": {"knowledge": "wikipedia", "k_wiki": 3, "rounds": 2},
            "pool": POOL,
        },
    ).json()["job_id"]
    items = [{"id": f"q{i}", "question": f"Capital of France ({i})?"} for i in range(3)]
    batch_id = client.post("/v1/batches", json={"items": items, "config": {"knowledge": "none"}}).json()[
        "batch_id"
    ]
    job = wait_status(client, job_id, {"completed", "failed"}, timeout_s=90)
    assert job["status"] == "completed", job
    rows = [json.loads(line) for line in client.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    for row in rows:
        assert (
            wait_status(client, row["job_id"], {"completed", "failed"}, timeout_s=90)["status"] == "completed"
        )
    job_ids = [job_id, *(row["job_id"] for row in rows)]

    before = everything(client, job_id, batch_id)
    assert before["events"][-1]["event"] == "job.completed" and before["after_end"] == []
    assert before["resumed"] == before["events"][3:]
    transcript = before["job"]["result"]["transcript"]
    assert transcript and all(rec["messages"] for rec in transcript)
    assert [r["result"]["answer"] for r in before["results"]] == ["Paris"] * 3
    assert set(job_ids) <= set(before["listed"]) and batch_id in before["batches"]

    r = redis_server.client()
    try:
        keys = {key: r.ttl(key) for ident in [*job_ids, batch_id] for key in r.scan_iter(f"parley:*{ident}*")}
        assert not [k for k in keys if k.endswith((":checkpoint", ":lease"))], keys
        # The worker wrote each job last (its terminal transition): it used the same retention.
        assert all(0 < ttl <= TTL_S for ttl in keys.values()), keys
        assert all(r.ttl(f"parley:job:{j}") > TTL_S - 120 for j in job_ids)
        for key in ("parley:owner:alice:jobs", "parley:owner:alice:batches"):
            assert 0 < r.ttl(key) <= TTL_S
        # The event streams lapse a minute after the job finished; here, at once.
        assert r.delete(*(f"parley:job:{j}:events" for j in job_ids)) == len(job_ids)
    finally:
        r.close()

    assert everything(client, job_id, batch_id) == before

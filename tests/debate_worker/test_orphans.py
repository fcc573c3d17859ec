"""No job is orphaned: a queued job whose broker message was lost is sent again (or failed at its
attempt cap) by the sweep, and an expired job record never keeps its id in the key's active set.

Real redis-server, the real gateway and, for the end-to-end case, a real Celery worker whose own sweep
finds the job; the broker's messages are lost by deleting the queue lists, as a flushed or restored
broker would.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from debate_worker.sweeper import JobSweeper
from debate_worker.worker_settings import WorkerSettings
from services.jobstore import JobRecord, RedisJobStore
from tests.api.conftest import KEY_A, api_settings
from tests.api.support import (
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    wait_status,
    worker_env,
)
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

Q = "What is the capital of France?"


def lose_messages(redis_server: RedisServer) -> int:
    r = redis_server.client()
    try:
        lost = int(r.llen("parley.interactive")) + int(r.llen("parley.batch"))
        r.delete("parley.interactive", "parley.batch")
        return lost
    finally:
        r.close()


@pytest.mark.slow
def test_a_queued_job_whose_message_was_lost_is_found_and_run(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with (
        ApiServer(api_settings(redis_server.url)) as api,
        httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as alice,
        ScriptedLLM() as llm,
    ):
        script_agreeing(llm)
        resp = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none"}})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["job_id"]
        assert lose_messages(redis_server) == 1  # no worker ran yet: the message is gone for good
        assert alice.get("/v1/usage").json()["limits"]["active_jobs"] == 1
        env = worker_env(
            redis_server.url,
            llm.base_url,
            PARLEY_WORKER_SWEEP_INTERVAL_S="0.5",
            PARLEY_WORKER_ORPHAN_AFTER_S="1",
        )
        started = time.monotonic()
        with WorkerProcess(env, tmp_path / "worker.log"):
            job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=60)
        took = time.monotonic() - started
        assert job["status"] == "completed", job
        events = [e["event"] for e in _events(alice, job_id)]
        assert "job.requeued" in events
        assert alice.get("/v1/usage").json()["limits"]["active_jobs"] == 0
    print(f"lost message found and the job completed {took:.1f} s after the worker started")


def _events(client: httpx.Client, job_id: str) -> list[dict[str, str]]:
    out = []
    with client.stream("GET", f"/v1/debates/{job_id}/events") as resp:
        for line in resp.iter_lines():
            if line.startswith("event:"):
                out.append({"event": line.split(":", 1)[1].strip()})
    return out


async def test_the_sweep_resends_an_orphan_once_fails_it_at_the_cap_and_drops_expired_ids(
    redis_server: RedisServer,
) -> None:
    store = RedisJobStore.from_url(redis_server.url, prefix="orph")
    settings = WorkerSettings(
        redis_url=redis_server.url,
        key_prefix="orph",
        sweep_interval_s=0.01,
        orphan_after_s=0.2,
        max_attempts=2,
    )
    published: list[str] = []
    sweeper = JobSweeper(store, settings, lambda job_id, queue: published.append(job_id), queues=("orph.q",))
    try:
        jobs = [JobRecord(job_id=f"job_{i:032x}", owner="o", question=Q, queue="orph.q") for i in range(3)]
        await store.create_jobs(jobs)
        young, lost, spent = (j.job_id for j in jobs)
        await store.add_attempts(spent, 2)
        # One job's message is still in the broker (as kombu keeps it: the id in the headers).
        await store.redis.rpush("orph.q", f'{{"headers": {{"argsrepr": "[\'{young}\']"}}}}')
        await store.redis.sadd(store.k_active("o"), "job_" + "f" * 32)  # its record expired long ago
        await asyncio.sleep(0.3)
        first = await sweeper.sweep()
        assert first is not None
        assert first.expired == ["job_" + "f" * 32]
        assert sorted(first.watched) == sorted([lost, spent])  # absent once: watched, not yet resent
        assert published == []
        await asyncio.sleep(0.15)  # the broker is read at most every orphan_after_s / 2
        second = await sweeper.sweep()
        assert second is not None and second.orphaned == [lost] and second.failed == [spent]
        assert published == [lost]
        assert (await store.get_job(young)).status == "queued"  # type: ignore[union-attr]
        assert (await store.get_job(lost)).status == "queued"  # type: ignore[union-attr]
        failed = await store.get_job(spent)
        assert failed is not None and failed.status == "failed" and "message was lost" in (failed.error or "")
        assert await store.active_count("o") == 2  # the expired id and the failed job are gone
    finally:
        await store.aclose()

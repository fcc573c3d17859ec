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
from services.jobstore.settings import DEFAULT_JOB_TTL_S
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
    store = RedisJobStore.from_url(redis_server.url, prefix="orph", ttl_s=DEFAULT_JOB_TTL_S)
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


class _Clock:
    """The sweeper's clock (``time.time``), moved by the test: minutes of sweeps in no time."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


async def test_default_settings_resend_a_lost_message_within_two_minutes_at_a_bounded_read_cost(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import debate_worker.sweeper as sweeper_module

    clock = _Clock()
    monkeypatch.setattr(sweeper_module, "time", clock)
    store = RedisJobStore.from_url(redis_server.url, prefix="orphdef", ttl_s=DEFAULT_JOB_TTL_S)
    settings = WorkerSettings(redis_url=redis_server.url, key_prefix="orphdef")  # the defaults
    published: list[str] = []
    sweepers = [  # two workers sweep in turn; the broker-read budget is shared through Redis
        JobSweeper(store, settings, lambda job_id, queue: published.append(job_id), queues=("orphdef.q",))
        for _ in range(2)
    ]
    try:
        # A long healthy queue: 3,000 jobs, every one with its message; one more whose message is lost
        # the moment it is stored (the worst case: it must first wait orphan_after_s to be a candidate).
        healthy = [
            JobRecord(job_id=f"job_{i:032x}", owner="o", question=Q, queue="orphdef.q") for i in range(3000)
        ]
        lost = JobRecord(job_id="job_" + "e" * 32, owner="o2", question=Q, queue="orphdef.q")
        await store.create_jobs([*healthy, lost])
        messages = [
            f'{{"headers": {{"argsrepr": "[\'{j.job_id}\']"}}, "body": "{"x" * 500}"}}' for j in healthy
        ]
        for i in range(0, len(messages), 500):
            await store.redis.lpush("orphdef.q", *messages[i : i + 500])
        lost_at = clock.now
        read = passes = 0
        resent_after = None
        while clock.now - lost_at < 600:  # ten minutes of sweeps, one every sweep_interval_s
            await store.redis.delete(f"{store.prefix}:sweep:lock")  # its PX is real time; the clock is not
            report = await sweepers[passes % 2].sweep()
            passes += 1
            assert report is not None
            read += report.broker_messages_read
            assert not set(report.orphaned) - {lost.job_id}, "a job whose message is there was resent"
            if report.orphaned and resent_after is None:
                resent_after = clock.now - lost_at
                await store.redis.lpush("orphdef.q", f'{{"headers": {{"argsrepr": "[\'{lost.job_id}\']"}}}}')
            clock.now += settings.sweep_interval_s
        assert published == [lost.job_id]  # once, and no healthy job
        assert resent_after is not None and resent_after <= 120, resent_after
        # The broker was read at most once per orphan_after_s / 2 over the ten minutes (not every sweep).
        reads_allowed = 600 / (settings.orphan_after_s / 2) + 1
        assert read <= reads_allowed * 3001, (read, passes)
        assert read < passes * 3000 / 2
        print(f"lost message sent again {resent_after:.0f} s after the loss; {read} messages read in 10 min")
    finally:
        await store.aclose()


async def test_a_delivery_nobody_holds_any_more_counts_as_lost(redis_server: RedisServer) -> None:
    """A queued job whose message sits only in kombu's unacked hash, delivered long ago (its consumer
    died with a Redis restart; kombu restores it only after the visibility timeout, an hour), is sent
    again; one delivered just now (a worker about to start it) is not."""
    store = RedisJobStore.from_url(redis_server.url, prefix="orphun", ttl_s=DEFAULT_JOB_TTL_S)
    settings = WorkerSettings(redis_url=redis_server.url, key_prefix="orphun", orphan_after_s=0.2)
    published: list[str] = []
    sweeper = JobSweeper(
        store, settings, lambda job_id, queue: published.append(job_id), queues=("orphun.q",)
    )
    try:
        held, stale = (
            JobRecord(job_id=f"job_{i:032x}", owner="u", question=Q, queue="orphun.q") for i in (7, 8)
        )
        await store.create_jobs([held, stale])
        await asyncio.sleep(0.3)  # both queued longer than orphan_after_s
        r = store.redis
        for tag, job in (("t-held", held), ("t-stale", stale)):
            await r.hset(
                "unacked", tag, f'[{{"headers": {{"argsrepr": "[\'{job.job_id}\']"}}}}, "", "orphun.q"]'
            )
        await r.zadd("unacked_index", {"t-stale": time.time() - 60})
        for _ in range(2):  # absent on two reads in a row
            await r.zadd("unacked_index", {"t-held": time.time()})  # delivered just now, each time
            await r.delete("orphun:sweep:next_broker_read", "orphun:sweep:lock")
            assert await sweeper.sweep() is not None
        assert published == [stale.job_id]
    finally:
        await store.redis.delete("unacked", "unacked_index")
        await store.aclose()

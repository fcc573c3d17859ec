"""Every job reaches an end, and transient outages are waited out.

Real redis-server (append-only file on), the API over HTTP, real Celery worker processes and the
scripted LLM. A task that raises, a hard time limit and a lapsed lease all end the job (failed, quota
freed, stream ended, batch complete) or requeue it within the attempt cap; a retriever down for 20 s
and an LLM answering 429 for 20 s delay the items of a batch instead of failing them; a worker sent
SIGTERM mid-debate hands its job back, and another worker resumes it from its checkpoint at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from debate_worker.sweeper import JobSweeper
from debate_worker.worker_settings import WorkerSettings
from services.jobstore import JobRecord, RedisJobStore
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from tests.api.conftest import KEY_A, api_settings
from tests.api.support import (
    JUDGE,
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    stored_events,
    wait_status,
    worker_env,
)
from tests.api.test_flow import read_sse
from tests.retriever.support import ReplayServer
from tests.support.scripted_llm import ClosedPort, ScriptedLLM, request_text

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Q = "What is the capital of France?"


@pytest.fixture(scope="module")
def aof_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("aof"), appendonly=True).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(aof_redis: RedisServer) -> Iterator[ApiServer]:
    with ApiServer(api_settings(aof_redis.url, allow_client_urls=True)) as server:
        yield server


@pytest.fixture
def alice(gateway: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as c:
        yield c


def wait_batch(client: httpx.Client, batch_id: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = client.get(f"/v1/batches/{batch_id}").json()
        if body["status"] == "completed":
            return body
        assert time.monotonic() < deadline, f"batch not finished: {body}"
        time.sleep(0.2)


def assert_ended_cleanly(client: httpx.Client, job_id: str, status: str) -> dict[str, Any]:
    job = wait_status(client, job_id, {status}, timeout_s=120)
    events = read_sse(client, f"/v1/debates/{job_id}/events")  # returns: the stream ended
    assert events[-1]["event"] == f"job.{status}"
    return job


def test_a_task_that_raises_ends_its_jobs(
    alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path
) -> None:
    with ScriptedLLM() as llm:
        script_agreeing(llm)
        # An agent URL httpx cannot even parse: the task raises httpx.InvalidURL, not an LLM error.
        config = {"knowledge": "none", "team": [{"base_url": "http://[::1/v1", "model": "m"}, {}]}
        with WorkerProcess(worker_env(aof_redis.url, llm.base_url), tmp_path / "w.log"):
            resp = alice.post(
                "/v1/batches", json={"items": [{"question": Q}, {"question": Q}], "config": config}
            )
            assert resp.status_code == 202, resp.text
            batch = wait_batch(alice, resp.json()["batch_id"])
            assert batch["counts"]["failed"] == 2
            rows = [
                json.loads(line)
                for line in alice.get(f"{resp.headers['location']}/results").text.splitlines()
            ]
            for row in rows:
                job = assert_ended_cleanly(alice, row["job_id"], "failed")
                assert "internal error: InvalidURL" in job["error"]
    usage = alice.get("/v1/usage").json()
    assert usage["today"]["reserved"] == 0 and usage["limits"]["active_jobs"] == 0  # quota and slot freed


def test_celery_stopping_on_an_unrecoverable_error_is_started_again(
    alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path
) -> None:
    """Celery's worker stops for good on an error it does not recover from (kombu's reconnect race
    after Redis vanished raises one): ``parley worker`` starts it again in place, the job runs, and a
    SIGTERM afterwards still stops it for good with exit code 0."""
    marker = tmp_path / "fault-raised"
    with ScriptedLLM() as llm:
        script_agreeing(llm)
        env = worker_env(
            aof_redis.url,
            llm.base_url,
            PARLEY_TEST_FAULT_MARKER=str(marker),
            PARLEY_WORKER_RESTART_DELAY_S="0.5",
        )
        worker = WorkerProcess(env, tmp_path / "w.log")
        worker.args[2] = "tests.api.fail_once_worker"
        with worker:
            assert marker.exists()
            job = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none"}})
            assert job.status_code == 202, job.text
            done = assert_ended_cleanly(alice, job.json()["job_id"], "completed")
            assert done["result"]["answer"] == "Paris"
        assert worker.proc is not None and worker.proc.returncode == 0
    log = worker.log()
    assert log.count("Unrecoverable error") == 1, log[-3000:]
    assert log.count("starting it again") == 1, log[-3000:]


def test_time_limit_ends_the_job(alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path) -> None:
    with ScriptedLLM(latency_s=1.5) as llm:
        script_agreeing(llm)
        env = worker_env(
            aof_redis.url,
            llm.base_url,
            PARLEY_WORKER_TASK_SOFT_TIME_LIMIT="2",
            PARLEY_WORKER_TASK_TIME_LIMIT="4",
        )
        with WorkerProcess(env, tmp_path / "w.log"):
            resp = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none"}})
            job = assert_ended_cleanly(alice, resp.json()["job_id"], "failed")
            assert "time limit exceeded" in job["error"]
    assert alice.get("/v1/usage").json()["today"]["reserved"] == 0


def test_a_vanished_worker_is_swept_and_its_job_resumed(
    alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path
) -> None:
    """The whole worker dies (a hard time limit or the OOM killer look the same from outside): its
    message stays unacknowledged for the hour-long visibility timeout, but another worker's sweep
    requeues the job once its lease has lapsed, and the job resumes from its checkpoint."""
    with ScriptedLLM(latency_s=0.4) as llm:
        script_agreeing(llm)
        llm.on(JUDGE, "They disagree. [No]")
        llm.rules.insert(0, llm.rules.pop())
        env = worker_env(
            aof_redis.url,
            llm.base_url,
            PARLEY_WORKER_LEASE_TTL_S="1",
            PARLEY_WORKER_SWEEP_INTERVAL_S="1",
        )
        doomed = WorkerProcess({**env, "PARLEY_WORKER_SWEEP_INTERVAL_S": "0"}, tmp_path / "a.log", name="a")
        doomed.start()
        try:
            cfg = {"knowledge": "none", "rounds": 3}
            job_id = alice.post("/v1/debates", json={"question": Q, "config": cfg}).json()["job_id"]
            wait_round(alice, job_id, 1)
            assert doomed.proc is not None
            os.killpg(doomed.proc.pid, signal.SIGKILL)
            doomed.proc.wait(timeout=10)
        finally:
            doomed.stop()
        with WorkerProcess(env, tmp_path / "b.log", name="b"):
            job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=60)
        assert job["status"] == "completed", job
        assert job["attempts"] == 2
        assert "job.requeued" in event_types(aof_redis, job_id)
        debater_rounds = sorted(r["round"] for r in job["result"]["transcript"] if r["role"] == "debater")
        assert debater_rounds == [1, 1, 2, 2, 3, 3]


def wait_round(client: httpx.Client, job_id: str, round_: int) -> None:
    deadline = time.monotonic() + 30
    while client.get(f"/v1/debates/{job_id}").json()["progress"]["round"] < round_:
        assert time.monotonic() < deadline, f"round {round_} never completed"
        time.sleep(0.05)


async def test_sweep_requeues_a_lapsed_job_once_then_fails_it_at_the_cap(aof_redis: RedisServer) -> None:
    store = RedisJobStore.from_url(aof_redis.url, prefix="sweep", ttl_s=DEFAULT_JOB_TTL_S)
    settings = WorkerSettings(
        redis_url=aof_redis.url, key_prefix="sweep", lease_ttl_s=0.6, sweep_interval_s=0.01, max_attempts=2
    )
    published: list[tuple[str, str]] = []
    sweeper = JobSweeper(store, settings, lambda job_id, queue: published.append((job_id, queue)))
    try:
        jobs = [JobRecord(job_id=f"job_{i}", owner="o", question=Q, queue="parley.batch") for i in range(2)]
        await store.create_jobs(jobs)
        for job in jobs:  # both were taken by a worker that then vanished (no lease left)
            assert await store.transition(job.job_id, "debating", ("queued",))
        await store.add_attempts("job_0", 1)
        await store.add_attempts("job_1", 2)
        await store.acquire_lease("job_1", "alive", 60_000)
        first = await sweeper.sweep()
        assert first is not None and first.watched == ["job_0"]  # one lease period of grace
        await asyncio.sleep(0.7)
        second = await sweeper.sweep()
        assert second is not None and second.requeued == ["job_0"]
        assert published == [("job_0", "parley.batch")]
        assert (await store.get_job("job_0")).status == "queued"  # type: ignore[union-attr]
        assert (await store.get_job("job_1")).status == "debating"  # type: ignore[union-attr]
        await store.redis.delete(store.k_lease("job_1"))  # its worker vanished too, at the cap
        for _ in range(2):
            await asyncio.sleep(0.7)
            await sweeper.sweep()
        failed = await store.get_job("job_1")
        assert failed is not None and failed.status == "failed" and "gave up" in (failed.error or "")
        assert len(published) == 1  # at the cap it is failed, not published again
    finally:
        await store.aclose()


def test_retriever_down_for_20s_mid_batch_every_item_completes(
    alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path
) -> None:
    def pool(method: str, path: str, body: bytes) -> tuple[int, Any, float]:
        question = json.loads(body)["question"] if body else ""
        items = [{"n": 1, "source": "wikipedia", "title": "France", "text": "Paris is the capital."}]
        return 200, {"pool_id": "p", "question": question, "items": items}, 0

    with ScriptedLLM() as llm, ClosedPort() as retriever:  # refused for the first 20 s
        script_agreeing(llm)
        env = worker_env(
            aof_redis.url,
            llm.base_url,
            retriever.url,
            PARLEY_RETRIEVER_CLIENT_TIMEOUT_S="2",
            PARLEY_RETRIEVER_CLIENT_RETRY_WINDOW_S="90",
        )
        with WorkerProcess(env, tmp_path / "w.log", concurrency=2) as worker:
            items = [{"question": f"{Q} ({i})"} for i in range(4)]
            config = {"knowledge": "wikipedia"}
            batch_id = alice.post("/v1/batches", json={"items": items, "config": config}).json()["batch_id"]
            started = time.monotonic()
            time.sleep(20)
            down = alice.get(f"/v1/batches/{batch_id}").json()["counts"]
            # waiting, not failing
            assert down["completed"] == 0 and down["failed"] == 0, item_errors(alice, batch_id, worker)
            with ReplayServer(pool, port=retriever.release()):
                batch = wait_batch(alice, batch_id, timeout_s=120)
            assert batch["counts"]["completed"] == 4, item_errors(alice, batch_id, worker)
            assert time.monotonic() - started >= 20


def item_errors(client: httpx.Client, batch_id: str, worker: WorkerProcess) -> str:
    """Why a batch's items failed, and the worker's last words: the message of a failed assertion."""
    rows = [json.loads(line) for line in client.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    errors = [f"{row.get('status')}: {row.get('error')}" for row in rows]
    return f"items: {errors}\nworker log:\n{worker.log()[-3000:]}"


def test_llm_answering_429_for_20s_every_item_completes(
    alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path
) -> None:
    with ScriptedLLM() as llm:
        script_agreeing(llm)
        env = worker_env(
            aof_redis.url,
            llm.base_url,
            PARLEY_LLM_MAX_ATTEMPTS="1000",
            PARLEY_LLM_RETRY_WINDOW_S="90",
            PARLEY_LLM_BACKOFF_BASE_S="0.5",
            PARLEY_LLM_BACKOFF_MAX_S="3",
        )
        with WorkerProcess(env, tmp_path / "w.log", concurrency=2):
            llm.fail_for(20, 429)
            items = [{"question": f"{Q} ({i})"} for i in range(4)]
            batch_id = alice.post(
                "/v1/batches", json={"items": items, "config": {"knowledge": "none"}}
            ).json()["batch_id"]
            batch = wait_batch(alice, batch_id, timeout_s=150)
            assert batch["counts"]["completed"] == 4, batch
        assert sum(1 for _ in llm.requests) > 16  # the refused attempts really happened


def test_sigterm_hands_the_job_back_and_another_worker_resumes_it(
    alice: httpx.Client, aof_redis: RedisServer, tmp_path: Path
) -> None:
    with ScriptedLLM(latency_s=1.2) as llm:  # a round takes ~2.5 s: SIGTERM lands mid-debate
        script_agreeing(llm)
        llm.on(JUDGE, "They disagree. [No]")
        llm.rules.insert(0, llm.rules.pop())
        env = worker_env(aof_redis.url, llm.base_url)
        first = WorkerProcess(env, tmp_path / "a.log", name="a").start()
        try:
            cfg = {"knowledge": "none", "rounds": 3}
            job_id = alice.post("/v1/debates", json={"question": Q, "config": cfg}).json()["job_id"]
            wait_status(alice, job_id, {"retrieving", "debating"}, timeout_s=30, poll_s=0.05)  # A has it
            with WorkerProcess(env, tmp_path / "b.log", name="b"):
                wait_round(alice, job_id, 1)
                assert first.proc is not None
                first.proc.send_signal(signal.SIGTERM)  # what `docker stop` sends to the main process
                sent = time.monotonic()
                while "job.requeued" not in event_types(aof_redis, job_id):
                    assert time.monotonic() - sent < 10, f"the job was not handed back: {first.log()[-2000:]}"
                    time.sleep(0.1)
                handed_back = time.monotonic() - sent
                job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=60)
            assert job["status"] == "completed", job
            assert handed_back < 5
            assert job["attempts"] == 1  # the hand-back did not count as an attempt
            debater_rounds = sorted(r["round"] for r in job["result"]["transcript"] if r["role"] == "debater")
            assert debater_rounds == [1, 1, 2, 2, 3, 3]
            first_round = [b for b in llm.requests if "Answer the question as accurately" in json.dumps(b)]
            assert len(first_round) == 2  # round 1 was not asked again
            assert first.proc.wait(timeout=30) is not None
            assert "resumes after round 1" in (tmp_path / "b.log").read_text()
            # The interrupted round's events come again under the same keys: a client replaces them.
            keys = [e["key"] for e in turn_events(aof_redis, job_id)]
            repeated = {k for k in keys if keys.count(k) > 1}
            assert all(k.startswith("turn/2/") for k in repeated)
            distinct_debater_turns = {k for k in keys if "/debater/" in k}
            assert len(distinct_debater_turns) == 6  # 3 rounds x 2 agents, each key once in the end
        finally:
            first.stop()


def turn_events(redis_server: RedisServer, job_id: str) -> list[dict[str, Any]]:
    r = redis_server.client()
    try:
        entries = stored_events(r, job_id)
    finally:
        r.close()
    return [json.loads(f["data"]) for _id, f in entries if f["type"] == "turn.completed"]


def event_types(redis_server: RedisServer, job_id: str) -> list[str]:
    r = redis_server.client()
    try:
        return [fields["type"] for _id, fields in stored_events(r, job_id)]
    finally:
        r.close()


def test_redis_crash_mid_batch_restarted_from_its_aof_loses_nothing(tmp_path: Path) -> None:
    """Redis killed (SIGKILL, no shutdown) while a batch runs and started again from its append-only
    file: every item ends completed, each exactly once, whatever the crash cut off (the last second
    of writes may be lost: a message redelivered, a job left running with no worker and swept)."""
    redis_server = RedisServer(tmp_path / "redis", appendonly=True).start()
    try:
        with ScriptedLLM(latency_s=0.3) as llm, ApiServer(api_settings(redis_server.url)) as api:
            script_agreeing(llm)
            served: Counter[str] = Counter()  # item -> tokens the LLM answered for it

            def count(body: dict[str, Any], tokens: int, client_gone: bool, took_s: float) -> None:
                match = re.search(r"\((\d+)\)", request_text(body))
                served[match.group(1) if match else "?"] += tokens

            llm.on_served = count
            env = worker_env(
                redis_server.url,
                llm.base_url,
                PARLEY_WORKER_LEASE_TTL_S="2",
                PARLEY_WORKER_SWEEP_INTERVAL_S="1",
                PARLEY_WORKER_VISIBILITY_TIMEOUT="3600",
            )
            headers = {"Authorization": f"Bearer {KEY_A}"}
            with (
                WorkerProcess(env, tmp_path / "w.log", concurrency=2),
                httpx.Client(base_url=api.url, headers=headers, timeout=30) as client,
            ):
                items = [{"id": str(i), "question": f"{Q} ({i})"} for i in range(12)]
                batch_id = client.post(
                    "/v1/batches", json={"items": items, "config": {"knowledge": "none"}}
                ).json()["batch_id"]
                deadline = time.monotonic() + 60
                while client.get(f"/v1/batches/{batch_id}").json()["counts"]["completed"] < 3:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                assert redis_server.proc is not None
                redis_server.proc.kill()  # a crash: nothing flushed beyond the append-only file
                redis_server.proc.wait(timeout=10)
                time.sleep(2)
                redis_server.start()  # same port, same folder: replays the AOF
                batch = wait_for_batch(client, batch_id, timeout_s=180)
                assert batch["counts"]["completed"] == 12, batch
                r = redis_server.client()
                try:
                    charged = {}
                    for row in client.get(f"/v1/batches/{batch_id}/results").text.splitlines():
                        job_id, item = json.loads(row)["job_id"], json.loads(row)["id"]
                        types = [f["type"] for _, f in stored_events(r, job_id)]
                        assert types.count("job.completed") == 1, (job_id, types)
                        charged[item] = int(r.hget(f"parley:job:{job_id}", "used_tokens") or 0)
                    # Each job is charged what the LLM served for it, the calls the crash cut included
                    # (a charge that found the store down is made once it is back).
                    mismatched = {i: (c, served[i]) for i, c in charged.items() if c != served[i]}
                    assert mismatched == {}, mismatched
                finally:
                    r.close()
    finally:
        redis_server.stop()


def wait_for_batch(client: httpx.Client, batch_id: str, timeout_s: float) -> dict[str, Any]:
    """Poll through a restarting store: a 503 while Redis loads its file is expected."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = client.get(f"/v1/batches/{batch_id}")
        if resp.status_code == 200 and resp.json()["status"] == "completed":
            return dict(resp.json())
        assert time.monotonic() < deadline, f"batch not finished: {resp.status_code} {resp.text[:300]}"
        time.sleep(0.3)

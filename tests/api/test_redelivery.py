"""A worker killed with SIGKILL in the middle of a debate: the job completes exactly once after redelivery.

Two ways a worker dies: its pool process is killed (Celery's main process sees it and, with
``task_reject_on_worker_lost``, puts the message back at once), or the whole worker is killed (the
message stays unacknowledged in Redis until the visibility timeout hands it to the next worker). In
both cases the next attempt resumes after the last checkpointed round and writes the only result.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import KEY_A
from tests.api.support import (
    JUDGE,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    stored_events,
    wait_status,
    worker_env,
)
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIRST_ROUND = "Answer the question as accurately as possible"  # Prompt 3.2: round 1 only


@pytest.fixture
def slow_llm() -> Iterator[ScriptedLLM]:
    # 0.3 s per call: a 3-round debate takes ~2 s, so the kill reliably lands in round 2.
    with ScriptedLLM(latency_s=0.3) as server:
        script_agreeing(server)
        server.on(JUDGE, "They disagree. [No]")
        server.rules.insert(0, server.rules.pop())
        yield server


def submit_and_wait_round_1(client: httpx.Client, llm: ScriptedLLM) -> str:
    """Submit a debate; return once round 1 is checkpointed and a round-2 call is in flight.

    Waiting for the round-2 request to reach the LLM (rather than only for the progress) makes the
    kill land while a call is out: between the checkpoint and the next call nothing is charged yet,
    and a kill there would leave nothing for the test to find.
    """
    cfg = {"knowledge": "none", "rounds": 3}
    job_id: str = client.post("/v1/debates", json={"question": "Kill me?", "config": cfg}).json()["job_id"]
    deadline = time.monotonic() + 30
    while client.get(f"/v1/debates/{job_id}").json()["progress"]["round"] < 1:
        assert time.monotonic() < deadline, "round 1 never completed"
        time.sleep(0.05)
    seen = len(llm.requests)
    while len(llm.requests) == seen:  # each call takes 0.3 s: the next one is in flight once it arrives
        assert time.monotonic() < deadline, "round 2 never started"
        time.sleep(0.01)
    return job_id


def worker_pid(redis_server: RedisServer, job_id: str) -> int:
    r = redis_server.client()
    token = r.hget(f"parley:job:{job_id}", "worker")  # "host/pid/nonce" of the process running it
    r.close()
    assert token
    return int(str(token).split("/")[1])


def assert_completed_once(
    client: httpx.Client, redis_server: RedisServer, job_id: str, llm: ScriptedLLM
) -> None:
    job = wait_status(client, job_id, {"completed", "failed"}, timeout_s=90)
    assert job["status"] == "completed", job
    assert job["attempts"] == 2
    result = job["result"]
    assert result["rounds"] == 3
    debater_rounds = sorted(r["round"] for r in result["transcript"] if r["role"] == "debater")
    assert debater_rounds == [1, 1, 2, 2, 3, 3]  # nothing duplicated by the second attempt
    # Round 1 was not run again: its prompt went to the LLM exactly twice (two debaters).
    first_round_calls = [b for b in llm.requests if FIRST_ROUND in json.dumps(b)]
    assert len(first_round_calls) == 2
    r = redis_server.client()
    events = stored_events(r, job_id)
    r.close()
    types = [fields["type"] for _id, fields in events]
    assert types.count("job.completed") == 1 and types[-1] == "job.completed"
    # The calls in flight when the worker was killed stay charged (their worst case, charged before
    # they were sent): the key paid for more than the transcript it got.
    r = redis_server.client()
    charged = int(r.hget(f"parley:job:{job_id}", "used_tokens") or 0)
    r.close()
    kept = sum(rec["prompt_tokens"] + rec["completion_tokens"] for rec in result["transcript"])
    assert charged > kept, (charged, kept)


def test_sigkill_of_pool_process_redelivers_and_resumes(
    redis_server: RedisServer, api_url: str, slow_llm: ScriptedLLM, tmp_path: Path
) -> None:
    env = worker_env(redis_server.url, slow_llm.base_url, PARLEY_WORKER_LEASE_TTL_S="2")
    with (
        WorkerProcess(env, tmp_path / "w.log", concurrency=1) as worker,
        httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {KEY_A}"}) as client,
    ):
        job_id = submit_and_wait_round_1(client, slow_llm)
        os.kill(worker_pid(redis_server, job_id), signal.SIGKILL)
        assert_completed_once(client, redis_server, job_id, slow_llm)
        assert "resumes after round" in worker.log()


def test_sigkill_of_whole_worker_redelivers_after_visibility_timeout(
    redis_server: RedisServer, api_url: str, slow_llm: ScriptedLLM, tmp_path: Path
) -> None:
    limits = {
        "PARLEY_WORKER_VISIBILITY_TIMEOUT": "6",
        "PARLEY_WORKER_TASK_TIME_LIMIT": "5",
        "PARLEY_WORKER_TASK_SOFT_TIME_LIMIT": "4",
        "PARLEY_WORKER_LEASE_TTL_S": "2",
        "PARLEY_WORKER_UNACKED_RESTORE_INTERVAL": "1",
        "PARLEY_WORKER_UNACKED_RESTORE_THROTTLE": "1",
    }
    env = worker_env(redis_server.url, slow_llm.base_url, **limits)
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {KEY_A}"}) as client:
        first = WorkerProcess(env, tmp_path / "w1.log", concurrency=1, name="first").start()
        try:
            job_id = submit_and_wait_round_1(client, slow_llm)
            assert first.proc is not None
            os.killpg(first.proc.pid, signal.SIGKILL)  # main process and pool child, no goodbye
            first.proc.wait(timeout=10)
        finally:
            first.stop()
        with WorkerProcess(env, tmp_path / "w2.log", concurrency=1, name="second") as second:
            assert_completed_once(client, redis_server, job_id, slow_llm)
            assert "resumes after round" in second.log()


@pytest.fixture
def api_url(api: object) -> str:
    return str(api.url)  # type: ignore[attr-defined]

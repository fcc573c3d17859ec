"""Budgets and daily quotas hold against a hostile key holder, measured from outside.

Real redis-server, the gateway under uvicorn, a real Celery worker and the scripted LLM, which counts
the tokens it serves (``tokens_served``: what a provider would bill). Every figure asserted here is
what the server served or what ``/v1/usage`` says, never what the engine believes it used.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import KEY_A, KEY_B, api_settings
from tests.api.support import ApiServer, RedisServer, WorkerProcess, script_agreeing, wait_status, worker_env
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Q = "What is the capital of France?"
QUOTA = 20_000


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with WorkerProcess(worker_env(redis_server.url, llm.base_url), log, concurrency=4):
        yield


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer, worker: None) -> Iterator[ApiServer]:
    settings = api_settings(redis_server.url, daily_token_quotas={"bob": QUOTA}, rate_limit_per_minute=10_000)
    with ApiServer(settings) as server:
        yield server


def client(server: ApiServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def used_today(c: httpx.Client) -> dict[str, Any]:
    today: dict[str, Any] = c.get("/v1/usage").json()["today"]
    return today


def run_job(c: httpx.Client, config: dict[str, Any]) -> dict[str, Any]:
    resp = c.post("/v1/debates", json={"question": Q, "config": config})
    assert resp.status_code == 202, resp.text
    return wait_status(c, resp.json()["job_id"], {"completed", "failed"}, timeout_s=120)


@pytest.mark.parametrize(
    ("config", "budget"),
    [
        ({"protocol": "self_consistency", "samples": 20, "max_tokens": 32}, 300),
        ({"protocol": "madke", "agents": 8, "knowledge": "none", "max_tokens": 32}, 600),
        ({"protocol": "self_consistency", "samples": 20, "max_tokens": 32}, 1_000),
        ({"protocol": "madke", "agents": 8, "knowledge": "none", "max_tokens": 32}, 3_000),
    ],
)
def test_a_job_never_uses_more_than_its_token_budget(
    gateway: ApiServer, scripted: ScriptedLLM, config: dict[str, Any], budget: int
) -> None:
    with client(gateway, KEY_A) as alice:
        before, served_before = used_today(alice)["tokens"], scripted.tokens_served
        job = run_job(alice, {**config, "budget_tokens": budget})
        served = scripted.tokens_served - served_before
        assert job["status"] == "completed", job
        assert served <= budget
        assert job["result"]["answer_source"].startswith("budget exhausted (token budget of")
        # Charged to the key as the calls ended: exactly what the server served.
        assert used_today(alice)["tokens"] - before == served


def test_concurrent_jobs_never_overrun_the_daily_quota(gateway: ApiServer, scripted: ScriptedLLM) -> None:
    """15 self-consistency jobs of 2,000 tokens at once against a 20,000-token quota."""
    served_before = scripted.tokens_served
    config = {"protocol": "self_consistency", "samples": 20, "max_tokens": 32, "budget_tokens": 2_000}
    with client(gateway, KEY_B) as bob:

        def submit(_: int) -> httpx.Response:
            return bob.post("/v1/debates", json={"question": Q, "config": config})

        # No job may finish (and release what it did not use) before the last answer: then exactly
        # QUOTA // 2,000 are admitted however the submissions and the running jobs interleave.
        scripted.latency_s = 2.0
        with ThreadPoolExecutor(15) as pool:
            responses = list(pool.map(submit, range(15)))
        scripted.latency_s = 0.02
        accepted = [r.json()["job_id"] for r in responses if r.status_code == 202]
        refused = [r for r in responses if r.status_code == 429]
        assert len(accepted) == QUOTA // 2_000 and len(refused) == 15 - len(accepted)
        assert all(r.json()["type"] == "/problems/quota-exceeded" for r in refused)
        for job_id in accepted:
            wait_status(bob, job_id, {"completed"}, timeout_s=120)
        today = used_today(bob)
    served = scripted.tokens_served - served_before
    assert served <= QUOTA
    assert today["tokens"] == served and today["reserved"] == 0


def test_a_cancelled_job_is_charged_for_what_was_served(gateway: ApiServer, scripted: ScriptedLLM) -> None:
    scripted.latency_s = 1.0
    with client(gateway, KEY_A) as alice:
        before, served_before = used_today(alice)["tokens"], scripted.tokens_served
        requests_before = len(scripted.requests)
        resp = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none", "rounds": 3}})
        job_id = resp.json()["job_id"]
        deadline = time.monotonic() + 60
        while len(scripted.requests) - requests_before < 3:  # two debaters served, the judge asked
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert alice.post(f"/v1/debates/{job_id}/cancel").status_code == 200
        assert alice.get(f"/v1/debates/{job_id}").json()["status"] == "cancelled"
        # The calls in flight at the cancel are held at their worst case until the server answers,
        # then charged what it served.
        deadline = time.monotonic() + 20
        while True:
            charged = used_today(alice)["tokens"] - before
            served = scripted.tokens_served - served_before
            if (charged == served and used_today(alice)["reserved"] == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        time.sleep(1.5)  # and nothing changes afterwards
        assert used_today(alice)["tokens"] - before == charged
    assert served > 0 and charged == served


def test_a_deleted_job_stays_charged_for_what_was_served(gateway: ApiServer, scripted: ScriptedLLM) -> None:
    """Deleting a running job removes its record, not its cost: the calls in flight when it was deleted
    settle on the key's day afterwards (through the job's tombstone), so charged = served still."""
    scripted.latency_s = 1.0
    with client(gateway, KEY_A) as alice:
        before, served_before = used_today(alice), scripted.tokens_served
        requests_before = len(scripted.requests)
        resp = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none", "rounds": 3}})
        job_id = resp.json()["job_id"]
        deadline = time.monotonic() + 60
        while len(scripted.requests) - requests_before < 3:  # calls in flight at the delete
            assert time.monotonic() < deadline
            time.sleep(0.05)
        deleted = alice.delete(f"/v1/debates/{job_id}")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json() == {"id": job_id, "object": "debate.deleted", "deleted": True}
        assert alice.get(f"/v1/debates/{job_id}").status_code == 404
        deadline = time.monotonic() + 20
        while True:
            today = used_today(alice)
            charged = today["tokens"] - before["tokens"]
            served = scripted.tokens_served - served_before
            if (charged == served and today["reserved"] == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        time.sleep(1.5)  # and nothing changes afterwards
        after = used_today(alice)
        assert after["tokens"] - before["tokens"] == charged
        assert after["jobs_cancelled"] - before["jobs_cancelled"] == 1  # it was cancelled on its way out
        assert alice.get(f"/v1/debates/{job_id}").status_code == 404  # the settling calls re-created nothing
    assert served > 0 and charged == served


def test_a_failed_job_is_charged_for_what_was_served(gateway: ApiServer, scripted: ScriptedLLM) -> None:
    scripted.latency_s = 0.3
    with client(gateway, KEY_A) as alice:
        before, served_before = used_today(alice)["tokens"], scripted.tokens_served
        requests_before = len(scripted.requests)
        resp = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none", "rounds": 3}})
        job_id = resp.json()["job_id"]
        deadline = time.monotonic() + 60
        while len(scripted.requests) - requests_before < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        scripted.fail_for(30, status=400)  # the LLM refuses every later call: the job fails
        job = wait_status(alice, job_id, {"failed"}, timeout_s=60)
        charged = used_today(alice)["tokens"] - before
    scripted.fail_for(0)
    served = scripted.tokens_served - served_before
    assert job["status"] == "failed"
    assert served > 0 and charged == served


def test_usage_of_a_finished_job_is_its_transcript(
    gateway: ApiServer, scripted: ScriptedLLM, tmp_path: Path
) -> None:
    script_agreeing(scripted)
    with client(gateway, KEY_A) as alice:
        before = used_today(alice)
        job = run_job(alice, {"knowledge": "none"})
        after = used_today(alice)
    usage = job["result"]["usage"]
    assert after["tokens"] - before["tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert after["calls"] - before["calls"] == usage["calls"]
    assert after["jobs_completed"] - before["jobs_completed"] == 1

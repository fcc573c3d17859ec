"""A Redis failover under load, end to end: Sentinel promotes a replica and everything follows it.

A primary, two replicas and three sentinels (``parley_testing.redis_topologies.SentinelGroup``), the
gateway and a real Celery worker reaching Redis only through ``sentinel://`` URLs, a scripted LLM. A
batch runs; single debates are submitted and a probe writes as fast as it can while the replicas'
link falls behind for half a second and the primary is killed (SIGKILL). The scenario and what it
measures are in ``parley_testing.failover`` (``python -m bench.redis_failover`` reports the same).

With Redis's defaults (asynchronous replication) the writes the old primary acknowledged but had not
sent are gone, jobs submitted in that window among them; what exists still ends, each job once. With
``min-replicas-to-write 1`` and ``PARLEY_*_REDIS_WAIT_REPLICAS=1`` nothing acknowledged is lost.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from parley_testing.failover import run_failover
from parley_testing.processes import redis_binary
from parley_testing.redis_topologies import SentinelGroup, ThrowawayCA
from tests.api.conftest import KEY_A, api_settings
from tests.api.support import ApiServer, WorkerProcess, script_agreeing, wait_status, worker_env
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _needs_redis() -> None:
    if redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")


def test_at_defaults_the_batch_completes_and_only_the_unreplicated_window_is_lost(tmp_path: Path) -> None:
    outcome = run_failover(tmp_path, safe=False, batch_items=8)
    print(outcome.summary())
    assert outcome.failover_s < 15
    assert outcome.unfinished == [], outcome.summary()
    assert outcome.completed_twice == []
    assert outcome.failed == {}
    # The batch was stored long before the failover: all of it is there and completed. What may be
    # lost are single debates accepted while the replicas were behind.
    assert outcome.completed + len(outcome.lost) == len(outcome.accepted)


def test_with_wait_and_min_replicas_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    outcome = run_failover(tmp_path, safe=True, batch_items=8)
    print(outcome.summary())
    assert outcome.lost == [], outcome.summary()
    assert outcome.writes_lost == 0, outcome.summary()
    assert outcome.unfinished == []
    assert outcome.completed_twice == []
    assert outcome.failed == {}
    assert outcome.completed == len(outcome.accepted)


def test_over_tls_the_gateway_and_a_worker_follow_a_failover(tmp_path: Path) -> None:
    """Servers, replication and sentinels on TLS only (one CA file for all): a debate completes before
    and after the primary is killed, the worker's Celery broker included."""
    ca = ThrowawayCA(tmp_path / "ca")
    group = SentinelGroup(tmp_path / "redis", replicas=2, tls=ca).start()
    try:
        settings = api_settings(group.url, redis_sentinel_master=group.master, redis_tls_ca_file=ca.cert_file)
        with ScriptedLLM() as llm, ApiServer(settings) as api:
            script_agreeing(llm)
            env = worker_env(
                group.url,
                llm.base_url,
                PARLEY_WORKER_REDIS_SENTINEL_MASTER=group.master,
                PARLEY_WORKER_REDIS_TLS_CA_FILE=str(ca.cert_file),
            )
            headers = {"Authorization": f"Bearer {KEY_A}"}
            with (
                WorkerProcess(env, tmp_path / "w.log"),
                httpx.Client(base_url=api.url, headers=headers, timeout=30) as client,
            ):
                for question in ("Capital of France?", "Capital of Italy?"):
                    if question.endswith("Italy?"):
                        group.wait_failover(group.kill_primary())
                    accepted = _submit(client, question)
                    done = wait_status(client, accepted, {"completed", "failed"}, timeout_s=90)
                    assert done["status"] == "completed", done
    finally:
        group.stop()


def _submit(client: httpx.Client, question: str, timeout_s: float = 30) -> str:
    """A debate's id, through the 503s of a failover still settling."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = client.post("/v1/debates", json={"question": question, "config": {"knowledge": "none"}})
        if resp.status_code == 202:
            return str(resp.json()["job_id"])
        assert resp.status_code == 503 and time.monotonic() < deadline, resp.text
        time.sleep(0.5)

"""A job whose record vanishes while a worker runs it (a Redis failover lost the writes that created
it) is written back from the worker's copy and runs to its end; a job removed on purpose is not.

A real redis-server, the gateway, a real Celery worker and a slow scripted LLM; the loss is made by
deleting the job's record and events while it debates, which is what the new primary looks like after
a failover that lost them.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from services.jobstore import JobRecord, RedisJobStore
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from tests.api.conftest import KEY_A, api_settings
from tests.api.support import (
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    stored_events,
    wait_status,
    worker_env,
)
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_vanished_running_job_is_written_back_and_completes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with ScriptedLLM(latency_s=0.5) as llm, ApiServer(api_settings(redis_server.url)) as api:
        script_agreeing(llm)
        env = worker_env(redis_server.url, llm.base_url)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        with (
            WorkerProcess(env, tmp_path / "w.log"),
            httpx.Client(base_url=api.url, headers=headers, timeout=30) as client,
        ):
            job_id = client.post(
                "/v1/debates", json={"question": "Capital of France?", "config": {"knowledge": "none"}}
            ).json()["job_id"]
            wait_status(client, job_id, {"debating"})
            r = redis_server.client()
            try:
                r.delete(f"parley:job:{job_id}", f"parley:job:{job_id}:events")
                assert client.get(f"/v1/debates/{job_id}").status_code == 404
                done = wait_status(client, job_id, {"completed", "failed"}, timeout_s=60)
                assert done["status"] == "completed", done
                types = [f["type"] for _, f in stored_events(r, job_id)]
                assert "job.restored" in types and types.count("job.completed") == 1, types
            finally:
                r.close()


async def test_restore_job_never_brings_back_a_removed_job(redis_server: RedisServer) -> None:
    store = RedisJobStore.from_url(
        redis_server.url, prefix=f"restore{time.time_ns()}", ttl_s=DEFAULT_JOB_TTL_S
    )
    try:
        job = JobRecord(job_id="job_r1", owner="alice", question="Q?", status="queued")
        await store.create_jobs([job])
        assert not await store.restore_job(job)  # it exists
        await store.redis.delete(store.k_job(job.job_id))
        assert await store.restore_job(job)  # lost: written back
        assert (await store.get_job(job.job_id)) is not None
        await store.delete_jobs([job.job_id])  # the gateway's rollback leaves a tombstone
        assert not await store.restore_job(job)
        assert await store.get_job(job.job_id) is None
    finally:
        await store.aclose()

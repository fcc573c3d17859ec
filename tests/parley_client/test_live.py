"""``parley_client`` against the live gateway: real redis-server, the gateway under uvicorn, a real
Celery worker, the scripted LLM.

The async client submits, streams events, waits, cancels, deletes and reads usage; the blocking client
runs a batch of 200 items (in chunks, from a list and from a JSONL file, which it then deletes)
through a gateway whose rate limit is a few requests a minute, so it meets a storm of 429s, waits out
each ``Retry-After`` and still yields every result in input order.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.config import DebateConfig
from parley_client import (
    AsyncParleyClient,
    BatchResult,
    DebateDeleted,
    JobView,
    ParleyClient,
    ParleyError,
    ParleyNotFound,
)
from tests.api.conftest import KEY_A, KEY_B, api_settings
from tests.api.support import ApiServer, RedisServer, WorkerProcess, script_echo
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SINGLE = DebateConfig(protocol="single")
RATE_LIMIT = 12


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    """Answers echo the question's last word, so every item gets its own answer."""
    with ScriptedLLM(latency_s=0.01) as server:
        script_echo(server)
        yield server


@pytest.fixture(scope="module")
def limited(redis_server: RedisServer, worker: WorkerProcess) -> Iterator[ApiServer]:
    """The same store and worker behind a gateway that allows a few requests a minute and at most
    100 items a batch."""
    settings = api_settings(redis_server.url, rate_limit_per_minute=RATE_LIMIT, max_batch_items=100)
    with ApiServer(settings) as server:
        yield server


async def test_async_client_submits_streams_waits_cancels_and_reads_usage(
    gateway: ApiServer, llm: ScriptedLLM
) -> None:
    async with AsyncParleyClient(gateway.url, api_key=KEY_A) as client:
        accepted = await client.submit("What is the capital of France?", SINGLE)
        assert accepted.status == "queued" and accepted.location == f"/v1/debates/{accepted.job_id}"
        events = [e async for e in client.events(accepted.job_id)]
        types = [e.type for e in events]
        assert types[0] == "job.queued" and types[-1] == "job.completed" and "turn.completed" in types
        # Resuming after an event gives exactly the events after it.
        tail = [e.id async for e in client.events(accepted.job_id, last_event_id=events[0].id)]
        assert tail == [e.id for e in events[1:]]
        job = await client.wait(accepted.job_id, poll_s=0.1)
        assert isinstance(job, JobView) and job.status == "completed"
        assert job.result is not None and job.result["answer"] == "France"

        usage = await client.usage()
        assert usage.owner == "alice" and usage.today.calls >= 1 and usage.today.tokens > 0

        llm.latency_s = 1.0
        try:
            slow = await client.submit("Which river runs through Paris?", SINGLE)
            cancelled = await client.cancel(slow.job_id)
            assert cancelled.status == "cancelled"
            assert (await client.cancel(slow.job_id)).status == "cancelled"  # cancelling is idempotent
            with pytest.raises(ParleyError) as finished:
                await client.cancel(accepted.job_id)
            assert finished.value.status == 409 and finished.value.problem["type"] == "/problems/finished"
        finally:
            llm.latency_s = 0.01
        # Deleting removes what cancelling keeps.
        deleted = await client.delete(slow.job_id)
        assert deleted == DebateDeleted(id=slow.job_id)
        with pytest.raises(ParleyNotFound):
            await client.get(slow.job_id)
        with pytest.raises(ParleyNotFound):
            await client.delete(slow.job_id)
        with pytest.raises(ParleyError) as refused:
            await client.submit("q?", {"protocol": "single", "agents": 99})
        assert refused.value.status == 422 and refused.value.problem["errors"]


def test_a_batch_of_200_through_a_429_storm(limited: ApiServer) -> None:
    questions = [f"What is item {i} called, say word{i}?" for i in range(200)]
    items = [{"id": f"q{i}", "question": q} for i, q in enumerate(questions)]
    retried: list[tuple[int, float]] = []
    started = time.monotonic()
    with ParleyClient(limited.url, api_key=KEY_B, on_retry=lambda s, w: retried.append((s, w))) as client:
        # 200 items in two batches of 100 (the gateway's limit), polled every 0.3 s, while three
        # other threads share the client and the key, reading the batches' progress: far more
        # requests than the rate limit lets through in a minute.
        with ThreadPoolExecutor(4) as pool:
            run = pool.submit(lambda: list(client.run_batch(items, SINGLE, chunk_size=100, poll_s=0.3)))
            pollers = [pool.submit(poll_usage, client, run) for _ in range(3)]
            results = run.result(timeout=300)
            polled = sum(p.result(timeout=300) for p in pollers)
        assert [r.id for r in results] == [f"q{i}" for i in range(200)]
        assert all(r.status == "completed" for r in results), [r for r in results if r.status != "completed"]
        assert [r.answer for r in results] == [f"word{i}" for i in range(200)]
        first = results[0].debate_result()
        assert first is not None and first.protocol == "single" and first.usage.calls == 1
        # The storm: 429s, each waited out for the Retry-After the gateway named (never more than
        # the rest of its one-minute window), and the client counted them; every poller got through.
        assert len(retried) >= 4 and {s for s, _ in retried} == {429}
        assert all(0 < w <= 61 for _, w in retried)
        assert client.retries == len(retried) and polled >= 3

    print(f"200 items through {len(retried)} 429s in {time.monotonic() - started:.0f}s")


def test_a_jsonl_file_runs_as_a_batch(gateway: ApiServer, tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    lines = [json.dumps({"id": f"q{i}", "question": f"Which word is number {i}, word{i}?"}) for i in range(5)]
    path.write_text("\n".join(lines) + "\n\n")  # a trailing blank line is skipped
    with ParleyClient(gateway.url, api_key=KEY_A) as client:
        from_file = list(client.run_batch(path, SINGLE, poll_s=0.3, progress=False))
    assert [(r.id, r.answer) for r in from_file] == [(f"q{i}", f"word{i}") for i in range(5)]
    with ParleyClient(gateway.url, api_key=KEY_A) as client:
        batch_id = client.get(str(from_file[0].job_id)).batch_id
        assert batch_id is not None
        assert client.delete_batch(batch_id).object == "batch.deleted"
        with pytest.raises(ParleyNotFound):
            client.get_batch(batch_id)


def poll_usage(client: ParleyClient, run: Future[list[BatchResult]]) -> int:
    """Read the key's usage until the batch run is over; how many reads got through."""
    n = 0
    while not run.done():
        assert client.usage().owner == "bob"
        n += 1
        time.sleep(0.2)
    return n


def test_a_blocking_client_nobody_closed_does_not_keep_python_alive(gateway: ApiServer) -> None:
    code = (
        "from parley_client import ParleyClient\n"
        f"client = ParleyClient({gateway.url!r}, api_key={KEY_A!r})\n"
        "print(client.usage().owner)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "alice", out.stderr

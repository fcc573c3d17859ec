"""Calls in flight per replica shared by processes through a real redis-server, against real scripted
servers on sockets.

What must hold: two processes that share their counts spread their debates over the replicas where
processes that see only their own calls pile onto one; a process that dies (SIGKILL, no goodbye)
stops counting within the TTL; a store that is down, or that accepts connections and never answers,
leaves each process with its own counts and holds up or fails no call; the usage a debate reports
is exactly what the servers served; the worker's settings turn the sharing on and off.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from debate_worker.celery_app import share_replica_load
from debate_worker.worker_settings import WorkerSettings
from engine.config import DebateConfig
from services.chat_model import ChatMessage
from services.llm.client import OpenAIChatClient, RetryPolicy
from services.llm.factory import RoleModelsFromSettings
from services.llm.replica_load import RedisReplicaLoad
from services.llm.replicas import REPLICA_HEALTH, ReplicaRegistry, _rank, affinity
from services.llm.settings import LLMSettings
from tests.api.support import RedisServer, running_redis
from tests.services.llm.test_replicas import _debate, script
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def msg(text: str) -> list[ChatMessage]:
    return [{"role": "user", "content": text}]


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture(autouse=True)
def _fresh_health() -> Iterator[None]:
    REPLICA_HEALTH.clear()
    yield
    REPLICA_HEALTH.share(None)
    REPLICA_HEALTH.clear()


@pytest.fixture
def loads(redis_server: RedisServer) -> Iterator[Callable[..., RedisReplicaLoad]]:
    """Sharings on the module's Redis, each its own hash per test; closed at the end."""
    made: list[RedisReplicaLoad] = []
    key = f"replica-load:{time.monotonic_ns()}"

    def make(**kwargs: Any) -> RedisReplicaLoad:
        kwargs.setdefault("key", key)
        kwargs.setdefault("ttl_s", 1.0)
        kwargs.setdefault("refresh_s", 0.02)
        shared = RedisReplicaLoad(redis_server.url, **kwargs)
        made.append(shared)
        return shared

    yield make
    for shared in made:
        shared.close()


def client(urls: list[str], registry: ReplicaRegistry, **kwargs: Any) -> OpenAIChatClient:
    kwargs.setdefault("sleep", no_sleep)
    kwargs.setdefault("retry", RetryPolicy(max_attempts=4, backoff_base_s=0.01))
    return OpenAIChatClient(urls, "scripted", replica_registry=registry, **kwargs)


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def keys_ranking_first(url: str, other: str, count: int) -> list[str]:
    """Affinity keys whose rendezvous order puts ``url`` before ``other``."""
    found = [k for k in (f"debate-{i}" for i in range(200)) if _rank(k, url) > _rank(k, other)]
    return found[:count]


async def debates_of_two_processes(
    one: ReplicaRegistry, two: ReplicaRegistry, a: ScriptedLLM, b: ScriptedLLM, *, shared: bool
) -> None:
    """Process one has a call in flight at replica a; process two then starts three debates at once,
    all of whose keys rank a first."""
    first, *more = keys_ranking_first(a.base_url, b.base_url, 4)
    async with client([a.base_url, b.base_url], one) as p1, client([a.base_url, b.base_url], two) as p2:
        with affinity(first):
            running = asyncio.ensure_future(p1.complete(msg("process one")))
        await until(lambda: len(a.requests) + len(b.requests) == 1)
        if shared:  # process two has seen that call
            await until(lambda: [s["load"] for s in p2.replicas.snapshot()] == [1, 0])

        async def debate(key: str) -> None:
            with affinity(key):
                await p2.complete(msg("process two"))

        await asyncio.gather(*(debate(key) for key in more))
        await running


def sent_to(server: ScriptedLLM, text: str) -> int:
    return sum(1 for r in server.requests if r["messages"][0]["content"] == text)


async def test_two_processes_sharing_counts_spread_instead_of_piling_on(
    loads: Callable[..., RedisReplicaLoad],
) -> None:
    with ScriptedLLM(latency_s=0.5, capacity=1) as a, ScriptedLLM(latency_s=0.5, capacity=1) as b:
        # Each process sees only its own calls: process two puts two of its three debates on a, where
        # they queue behind process one's call: 3 calls at a, 1 at b.
        await debates_of_two_processes(ReplicaRegistry(), ReplicaRegistry(), a, b, shared=False)
        assert (len(a.requests), len(b.requests)) == (3, 1)
        a.reset()
        b.reset()
        # Shared: process two counts process one's call at a too: 2 and 2.
        two = ReplicaRegistry(loads())
        await debates_of_two_processes(ReplicaRegistry(loads()), two, a, b, shared=True)
        assert sent_to(a, "process one") == 1
        assert (sent_to(a, "process two"), sent_to(b, "process two")) == (1, 2)


async def test_concurrent_debates_of_two_processes_spread_evenly(
    loads: Callable[..., RedisReplicaLoad],
) -> None:
    # Two processes, three debates each at once, three calls per debate, on two one-slot replicas.
    with ScriptedLLM(latency_s=0.15, capacity=1) as a, ScriptedLLM(latency_s=0.15, capacity=1) as b:
        urls = [a.base_url, b.base_url]
        one, two = ReplicaRegistry(loads()), ReplicaRegistry(loads())

        async def debate(llm: OpenAIChatClient, key: str) -> None:
            with affinity(key):
                for _ in range(3):
                    await llm.complete(msg(key))

        async with client(urls, one, max_concurrency=1) as p1, client(urls, two, max_concurrency=1) as p2:
            await asyncio.gather(
                *(debate(p1, f"one-{i}") for i in range(3)), *(debate(p2, f"two-{i}") for i in range(3))
            )
    # 18 calls: split 9 / 9 give or take the moment's sync, never most of them on one replica.
    assert len(a.requests) + len(b.requests) == 18
    assert abs(len(a.requests) - len(b.requests)) <= 4


CHILD = """
import sys, time
from services.llm.replica_load import RedisReplicaLoad
shared = RedisReplicaLoad(sys.argv[1], key=sys.argv[2], ttl_s=float(sys.argv[3]), refresh_s=0.02)
shared.publish({"http://a:1/v1": 3, "http://b:1/v1": 1})
print("published", flush=True)
time.sleep(600)
"""


def test_the_counts_of_a_dead_process_lapse(
    redis_server: RedisServer, loads: Callable[..., RedisReplicaLoad]
) -> None:
    watcher = loads(ttl_s=1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, redis_server.url, watcher.key, "1.0"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"published"
        wait_until(lambda: watcher.others() == {"http://a:1/v1": 3, "http://b:1/v1": 1})
        os.kill(child.pid, signal.SIGKILL)  # no goodbye: its fields stay in Redis
        child.wait(timeout=10)
        killed = time.monotonic()
        wait_until(lambda: watcher.others() == {}, timeout_s=4.0)
        assert time.monotonic() - killed <= 1.0 + 1.0  # within the TTL (and a sync)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    # The dead process's fields were dropped from the hash, not only ignored.
    fields = redis_server.client().hkeys(watcher.key)
    assert all(f.startswith(_process_of(watcher)) for f in fields)


def _process_of(shared: RedisReplicaLoad) -> str:
    live = shared._live
    assert live is not None
    return live.process


async def test_a_closed_process_stops_counting_at_once(loads: Callable[..., RedisReplicaLoad]) -> None:
    leaving, staying = loads(ttl_s=30.0), loads(ttl_s=30.0)
    leaving.publish({"http://a:1/v1": 2})
    await until(lambda: dict(staying.others() or {}) == {"http://a:1/v1": 2})
    leaving.close()
    await until(lambda: staying.others() == {})  # long before its 30 s TTL


async def test_redis_down_means_local_counts_and_no_error(tmp_path: Path) -> None:
    # A redis-server of its own: this test stops it.
    with contextlib.contextmanager(running_redis)(tmp_path / "redis") as server:
        shared = RedisReplicaLoad(server.url, key="load", ttl_s=0.5, refresh_s=0.02)
        other = RedisReplicaLoad(server.url, key="load", ttl_s=0.5, refresh_s=0.02)
        try:
            with ScriptedLLM(latency_s=0.05) as a, ScriptedLLM(latency_s=0.05) as b:
                other.publish({a.base_url: 5})
                await until(lambda: dict(shared.others() or {}) == {a.base_url: 5})
                async with client([a.base_url, b.base_url], ReplicaRegistry(shared)) as llm:
                    # Shared: a holds five calls of another process, so a new debate starts on b.
                    with affinity(keys_ranking_first(a.base_url, b.base_url, 1)[0]):
                        await llm.complete(msg("before"))
                    assert sent_to(b, "before") == 1
                    server.stop()
                    await until(lambda: shared.others() is None, timeout_s=3.0)
                    # The store is gone: every call still succeeds, promptly, by this process's counts.
                    started = time.monotonic()
                    results = await asyncio.gather(*(llm.complete(msg("during")) for _ in range(8)))
                    assert time.monotonic() - started < 2.0
                    assert all(r.text for r in results)
                    assert sent_to(a, "during") == 4 and sent_to(b, "during") == 4  # least outstanding
                    assert all(s["load"] == s["outstanding"] == 0 for s in llm.replicas.snapshot())
        finally:
            shared.close()
            other.close()


async def test_a_store_that_never_answers_holds_up_no_call() -> None:
    # Accepts connections (the kernel's backlog) and never replies: the sync thread times out on
    # its own; the calls never wait for it.
    with socket.socket() as silent, ScriptedLLM(latency_s=0.02) as a, ScriptedLLM(latency_s=0.02) as b:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        shared = RedisReplicaLoad(url, ttl_s=1.5, refresh_s=0.02)
        try:
            async with client([a.base_url, b.base_url], ReplicaRegistry(shared)) as llm:
                started = time.monotonic()
                for i in range(10):
                    with affinity(f"debate-{i}"):
                        await llm.complete(msg("q"))
                assert time.monotonic() - started < 2.0
                assert shared.others() is None
        finally:
            shared.close()
    assert len(a.requests) + len(b.requests) == 10


async def test_nothing_listening_means_local_counts() -> None:
    with ClosedPort() as closed:
        shared = RedisReplicaLoad(f"redis://127.0.0.1:{closed.port}/0", ttl_s=0.5, refresh_s=0.02)
        registry = ReplicaRegistry(shared)
        try:
            registry.changed()  # publishing never raises
            await asyncio.sleep(0.2)
            assert registry.others() is None
        finally:
            shared.close()


async def test_debate_usage_is_exact_with_shared_counts(
    loads: Callable[..., RedisReplicaLoad],
) -> None:
    # The process-wide registry shares, as in a worker: two sets of models (two "processes" worth of
    # debates, one registry here) over two replicas; every token reported is one a server served.
    REPLICA_HEALTH.share(loads())
    with ScriptedLLM(latency_s=0.02) as a, ScriptedLLM(latency_s=0.02) as b:
        script(a)
        script(b)
        b.fail_next(502)
        settings = LLMSettings(
            base_url=f"{a.base_url},{b.base_url}",
            model="m",
            structured_output="off",
            backoff_base_s=0.01,
            max_concurrency=1,
        )
        models = RoleModelsFromSettings(settings)
        config = DebateConfig(prompt_style="paper", judge="llm", rounds=3)
        try:
            results = await asyncio.gather(*(_debate(models, config, f"job-{i}") for i in range(6)))
        finally:
            await models.aclose()
        served = a.tokens_served + b.tokens_served
    reported = sum(r.usage.prompt_tokens + r.usage.completion_tokens for r in results)
    recorded = sum(rec.prompt_tokens + rec.completion_tokens for r in results for rec in r.transcript)
    assert all(r.answer == "Leonardo da Vinci" for r in results)
    assert reported == recorded == served
    assert sum(r.usage.calls for r in results) == len(a.requests) + len(b.requests) - 1
    assert a.requests and b.requests


def test_the_worker_settings_turn_sharing_on_and_off(redis_server: RedisServer) -> None:
    registry = ReplicaRegistry()
    shared = share_replica_load(
        WorkerSettings(redis_url=redis_server.url, key_prefix="p", replica_load_ttl_s=2.0), registry
    )
    try:
        assert isinstance(shared, RedisReplicaLoad)
        assert shared.key == "p:replica-load" and shared.ttl_s == 2.0
        assert registry._shared is shared
    finally:
        if shared is not None:
            shared.close()
    assert share_replica_load(WorkerSettings(replica_load_ttl_s=0), registry) is None
    assert registry._shared is None

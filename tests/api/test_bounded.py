"""The gateway's resources stay bounded: event streams, Redis calls, batch bodies, JSON depth, claims.

Real redis-server processes and the real app under uvicorn (in a thread, or as ``python -m api.cli
api`` where its memory is measured); no worker runs, so queued jobs stay queued and their event
streams stay open, blocked in Redis, for as long as a test needs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.guards import Idempotency
from api.jsonlimits import json_shape, parse_batch_json
from api.submission import fingerprint
from tests.api.conftest import KEY_A, KEY_B, KEYS, api_settings
from tests.api.support import ROOT, ApiServer, RedisServer
from tests.support.scripted_llm import free_port

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
Q = {"question": "What is the capital of France?", "config": {"knowledge": "none"}}
ALICE = {"Authorization": f"Bearer {KEY_A}"}
BOB = {"Authorization": f"Bearer {KEY_B}"}
# The API process's peak resident memory while it refuses a 32 MiB batch must stay below this.
RSS_BOUND_MB = 400


def assert_problem(resp: httpx.Response, status: int, type_: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text[:500]
    assert resp.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = resp.json()
    assert body["status"] == status and body["detail"]
    if type_ is not None:
        assert body["type"] == type_, body
    return body


# -- JSON depth --------------------------------------------------------------------------------------


def test_json_shape_matches_a_reference_lexer() -> None:
    """Depth and value counts from the vectorised scan equal a plain character-by-character lexer's,
    escapes and brackets inside strings included, whatever the chunk boundaries."""
    import api.jsonlimits as jl

    def reference(text: str) -> tuple[int, int]:
        depth = deepest = values = 0
        inside = escaped = False
        for ch in text:
            if inside:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    inside = False
            elif ch == '"':
                inside = True
            elif ch in "[{":
                depth += 1
                deepest = max(deepest, depth)
                values += 1
            elif ch in "]}":
                depth -= 1
            elif ch == ",":
                values += 1
        return deepest, values

    pieces = ["a", "\\", '"', "[", "]", "{", "}", ",", "\\\\", "\n", "é"]

    def value(level: int, rng: random.Random) -> Any:
        r = rng.random()
        if level > 6 or r < 0.3:
            return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        if r < 0.65:
            return [value(level + 1, rng) for _ in range(rng.randint(0, 4))]
        return {value(7, rng): value(level + 1, rng) for _ in range(rng.randint(0, 3))}

    rng = random.Random(7)
    chunk = jl._CHUNK
    try:
        for _ in range(400):
            jl._CHUNK = rng.choice([1, 2, 3, 7, 64, 1 << 20])
            text = json.dumps(value(0, rng), ensure_ascii=rng.random() < 0.5)
            shape = json_shape(text.encode())
            assert (shape.depth, shape.values) == reference(text), (text, jl._CHUNK)
    finally:
        jl._CHUNK = chunk


@pytest.mark.parametrize(
    "nested",
    [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"[" * 100_000],
)
def test_deeply_nested_json_is_400_too_deep_on_every_json_route(
    redis_server: RedisServer, nested: bytes
) -> None:
    with (
        ApiServer(api_settings(redis_server.url, key_prefix="deep")) as api,
        httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client,
    ):
        json_headers = {"content-type": "application/json"}
        for path in ("/v1/debates", "/v1/batches"):
            started = time.monotonic()
            resp = client.post(path, content=nested, headers=json_headers)
            assert_problem(resp, 400, "/problems/too-deep")
            assert time.monotonic() - started < 5
        # Inside a body that is otherwise fine: a debate's answers, a batch item, its config.
        inner = b"[" * 500 + b"]" * 500
        debate = b'{"question": "q?", "answers": ' + inner + b"}"
        assert_problem(
            client.post("/v1/debates", content=debate, headers=json_headers), 400, "/problems/too-deep"
        )
        batch = b'{"items": [{"question": "q?", "answers": ' + inner + b"}]}"
        assert_problem(
            client.post("/v1/batches", content=batch, headers=json_headers), 400, "/problems/too-deep"
        )
        # JSONL: a line of a multipart upload or an x-ndjson body, and the multipart config part.
        jsonl = b'{"question": "a?"}\n[' + b"[" * 5000 + b"]" * 5000 + b"]\n"
        resp = client.post("/v1/batches", files={"file": ("b.jsonl", jsonl)}, data={"config": "[" * 1000})
        assert "line 2" in assert_problem(resp, 400, "/problems/too-deep")["detail"]
        resp = client.post("/v1/batches", content=jsonl, headers={"content-type": "application/x-ndjson"})
        assert_problem(resp, 400, "/problems/too-deep")
        resp = client.post(
            "/v1/batches",
            files={"file": ("b.jsonl", b'{"question": "a?"}\n')},
            data={"config": "[" * 1000 + "]" * 1000},
        )
        assert_problem(resp, 400, "/problems/too-deep")
        # Depth at the limit is parsed as usual: a validation problem, not a depth one and not a 500.
        at_limit = b'{"question": "q?", "answers": ' + b"[" * 399 + b"]" * 399 + b"}"
        assert_problem(client.post("/v1/debates", content=at_limit, headers=json_headers), 422)
        assert client.post("/v1/debates", json=Q).status_code == 202


# -- Batch bodies are counted before they are built --------------------------------------------------


def test_batch_json_parsing_keeps_its_answers(redis_server: RedisServer) -> None:
    """The incremental parser answers as the whole-document parser did: malformed 400, wrong shape
    422, more items than allowed 422 with the limit."""
    assert parse_batch_json(
        '{"config": {"rounds": 2}, "items": [{"question": "a"}]}', max_items=5, max_config_chars=99
    )
    settings = api_settings(redis_server.url, key_prefix="shape", max_batch_items=100)
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client:
        json_headers = {"content-type": "application/json"}
        for body, status in [
            (b"[1,2", 400),
            (b'{"items": [{"question": "a?"}]} x', 400),
            (b'{"items": [{"question": "a?"},]}', 400),
            (b'[{"question": "a?"}]', 422),
            (b'{"items": 5}', 422),
            (b'{"items": [], "colour": "red"}', 422),
            (b'{"config": {"rounds": 2}}', 422),
            (b'{"items": [{"question": "a?"}], "config": {"rounds": 0}}', 422),
        ]:
            assert_problem(client.post("/v1/batches", content=body, headers=json_headers), status)
        many = {"items": [{"question": f"q{i}?"} for i in range(5000)]}
        detail = assert_problem(client.post("/v1/batches", json=many), 422)["detail"]
        assert "limit is 100" in detail
        lines = b"".join(b'{"question": "q?"}\n' for _ in range(5000))
        detail = assert_problem(client.post("/v1/batches", files={"file": ("b.jsonl", lines)}), 422)["detail"]
        assert "limit is 100" in detail
        ok = client.post(
            "/v1/batches",
            # A UTF-8 byte order mark is read past, as json.loads(bytes) did.
            content=b'\xef\xbb\xbf{"config": {"rounds": 2}, "items": [{"question": "a?"}, {"question": "b?"}]'
            + b"}",
            headers=json_headers,
        )
        assert ok.status_code == 202 and ok.json()["total"] == 2
        status = client.get(ok.headers["location"]).json()
        assert status["config"]["rounds"] == 2


def vm_hwm_mb(pid: int) -> float:
    """Peak resident set size of a process (``VmHWM`` in /proc), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def api_process(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m api.cli api`` as its own process (default limits), so its memory can be measured."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "OTEL_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "PARLEY_API_REDIS_URL": redis_server.url,
            "PARLEY_API_KEY_PREFIX": "rss",
            "PARLEY_API_KEYS": json.dumps(KEYS),
        }
    )
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "api.log").read_text()[-3000:])
            time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_32_mib_batches_are_refused_within_a_memory_bound(
    api_process: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, proc = api_process
    limit = 32 << 20
    figures: dict[str, float] = {"after start-up": vm_hwm_mb(proc.pid)}
    with httpx.Client(base_url=url, headers=ALICE, timeout=120) as client:
        # 32 MiB of empty items: 11 million objects had the body been parsed whole.
        head, tail = b'{"items": [', b"{}]}"
        empty = head + b"{}," * ((limit - len(head) - len(tail)) // 3) + tail
        assert len(empty) <= limit
        resp = client.post("/v1/batches", content=empty, headers={"content-type": "application/json"})
        assert "limit" in assert_problem(resp, 422, "/problems/invalid-batch")["detail"]
        figures["32 MiB JSON of empty items"] = vm_hwm_mb(proc.pid)

        # Under the value limit but far over the item limit: refused at item 10,001.
        item = b'{"question": "q?"},'
        many = head + item * (900_000) + b'{"question": "q?"}]}'
        resp = client.post("/v1/batches", content=many, headers={"content-type": "application/json"})
        assert "more than 10000 items" in assert_problem(resp, 422)["detail"]
        figures[f"{len(many) >> 20} MiB JSON of 900,001 items"] = vm_hwm_mb(proc.pid)

        # Ten million tiny JSONL lines, as an upload and as an x-ndjson body.
        lines = b"{}\n" * ((limit - 4096) // 3)
        resp = client.post("/v1/batches", files={"file": ("b.jsonl", lines, "application/x-ndjson")})
        assert "more than 10000 items" in assert_problem(resp, 422)["detail"]
        figures["32 MiB JSONL upload of tiny lines"] = vm_hwm_mb(proc.pid)
        resp = client.post("/v1/batches", content=lines, headers={"content-type": "application/x-ndjson"})
        assert "more than 10000 items" in assert_problem(resp, 422)["detail"]
        figures["32 MiB x-ndjson body of tiny lines"] = vm_hwm_mb(proc.pid)

        # One item that nests millions of empty lists: counted, never built.
        nested = b'{"items": [{"question": "q?", "answers": [' + b"[]," * ((limit - 100) // 3) + b"[]]}]}"
        resp = client.post("/v1/batches", content=nested, headers={"content-type": "application/json"})
        assert "JSON values" in assert_problem(resp, 422)["detail"]
        figures["32 MiB JSON, one item of empty lists"] = vm_hwm_mb(proc.pid)
        assert client.get("/healthz").status_code == 200
    print("\nAPI process peak RSS (VmHWM):")
    for what, mb in figures.items():
        print(f"  {what}: {mb:.0f} MB")
    assert max(figures.values()) < RSS_BOUND_MB, figures


# -- Idempotency claims ------------------------------------------------------------------------------


def test_a_crashed_requests_pending_claim_expires(redis_server: RedisServer) -> None:
    settings = api_settings(redis_server.url, key_prefix="idemcrash", idempotency_pending_ttl_s=2)
    body = json.dumps(Q).encode()
    key = f"crashed-{time.time_ns()}"
    r = redis_server.client()
    claim_key = Idempotency(r, "idemcrash", 3600)._key("alice", key)  # type: ignore[arg-type]
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client:
        headers = {"Idempotency-Key": key, "content-type": "application/json"}
        # What a request that crashed after claiming the key leaves behind: a pending claim with the
        # short expiry it was written with.
        claim = json.dumps({"state": "pending", "fp": fingerprint(body, "/v1/debates")})
        r.set(claim_key, claim, ex=settings.idempotency_pending_ttl_s)
        assert_problem(client.post("/v1/debates", content=body, headers=headers), 409)
        deadline = time.monotonic() + 10
        while r.exists(claim_key):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        first = client.post("/v1/debates", content=body, headers=headers)
        assert first.status_code == 202
        # The finished response is kept for the long TTL and replayed.
        assert r.ttl(claim_key) > settings.idempotency_pending_ttl_s
        again = client.post("/v1/debates", content=body, headers=headers)
        assert again.status_code == 202 and again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
        # A claim the gateway writes itself carries the short expiry too.
        fresh = f"fresh-{time.time_ns()}"
        ttl_key = Idempotency(r, "idemcrash", 3600)._key("alice", fresh)  # type: ignore[arg-type]
        asyncio.run(_claim(redis_server.url, fresh))
        assert 0 < r.ttl(ttl_key) <= 2
    r.close()


async def _claim(url: str, key: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        await Idempotency(client, "idemcrash", 3600, pending_ttl_s=2).begin("alice", key, "fp")
    finally:
        await client.aclose()  # type: ignore[attr-defined]  # types-redis predates redis 5's aclose


# -- Redis that hangs or is full ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_hung_redis_answers_503_promptly(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "hung").start()
    assert redis.proc is not None
    settings = api_settings(redis.url, redis_timeout_s=0.5)
    try:
        with ApiServer(settings) as api, httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client:
            ok = client.post("/v1/debates", json=Q)
            assert ok.status_code == 202
            os.kill(redis.proc.pid, signal.SIGSTOP)  # alive, connected, answering nothing
            try:
                for method, path in [
                    ("GET", "/healthz"),
                    ("GET", ok.headers["location"]),
                    ("POST", "/v1/debates"),
                ]:
                    started = time.monotonic()
                    resp = client.request(method, path, json=Q if method == "POST" else None)
                    took = time.monotonic() - started
                    assert_problem(resp, 503, "/problems/unavailable")
                    assert resp.headers["retry-after"] == "2"
                    # One timeout and one retry at most, not a hang.
                    assert took < 3, (path, took)
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
            assert client.get("/healthz").status_code == 200
            assert client.post("/v1/debates", json=Q).status_code == 202
    finally:
        redis.stop()


def test_a_full_redis_answers_503_store_full_and_logs_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    redis = RedisServer(tmp_path / "full").start()
    r = redis.client()
    try:
        with (
            ApiServer(api_settings(redis.url)) as api,
            httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client,
        ):
            assert client.post("/v1/debates", json=Q).status_code == 202
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory", "1")  # every write is now over the cap
            caplog.set_level(logging.ERROR, logger="parley.api")
            for method, path in [("POST", "/v1/debates"), ("POST", "/v1/batches")]:
                body = Q if path == "/v1/debates" else {"items": [{"question": "a?"}]}
                resp = client.request(method, path, json=body)
                assert_problem(resp, 503, "/problems/store-full")
                assert resp.headers["retry-after"] == "2"
            errors = [
                rec for rec in caplog.records if rec.levelno == logging.ERROR and "full" in rec.getMessage()
            ]
            assert errors, caplog.text
            assert client.get("/healthz").status_code == 200  # reads still work
            r.config_set("maxmemory", "0")
            assert client.post("/v1/debates", json=Q).status_code == 202
    finally:
        r.close()
        redis.stop()


# -- Event streams -----------------------------------------------------------------------------------


def stream_count(redis_server: RedisServer, prefix: str, owner: str) -> int:
    r = redis_server.client()
    try:
        return int(r.zcard(f"{prefix}:streams:{owner}"))
    finally:
        r.close()


def wait_for(predicate: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@pytest.mark.slow
def test_streams_are_capped_per_key_and_per_process(redis_server: RedisServer) -> None:
    prefix = "streamcap"
    settings = api_settings(
        redis_server.url,
        key_prefix=prefix,
        max_streams_per_key=2,
        max_streams_per_process=3,
        stream_slot_ttl_s=3,
    )
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=30) as client:
        alice_job = client.post("/v1/debates", json=Q, headers=ALICE).json()["job_id"]
        bob_job = client.post("/v1/debates", json=Q, headers=BOB).json()["job_id"]
        alice_events, bob_events = f"/v1/debates/{alice_job}/events", f"/v1/debates/{bob_job}/events"
        with contextlib.ExitStack() as open_streams:
            first = open_streams.enter_context(client.stream("GET", alice_events, headers=ALICE))
            open_streams.enter_context(client.stream("GET", alice_events, headers=ALICE))
            assert first.status_code == 200
            assert stream_count(redis_server, prefix, "alice") == 2
            third = client.get(alice_events, headers=ALICE)
            assert_problem(third, 429, "/problems/too-many-streams")
            assert third.headers["retry-after"] == "2"
            assert "key" in third.json()["detail"]

            bobs = open_streams.enter_context(client.stream("GET", bob_events, headers=BOB))
            assert bobs.status_code == 200
            # Three streams are open in this process: bob's second is refused by the process cap.
            over = client.get(bob_events, headers=BOB)
            assert "server" in assert_problem(over, 429, "/problems/too-many-streams")["detail"]
            # Requests are still served while the streams block in Redis.
            assert client.get("/healthz").status_code == 200

            # A slot lives while its stream does: it is renewed past its 3 s lapse time.
            time.sleep(4)
            assert stream_count(redis_server, prefix, "alice") == 2
            assert_problem(client.get(alice_events, headers=ALICE), 429)
        # Closing the streams gives their slots back, in Redis and in the process.
        wait_for(lambda: stream_count(redis_server, prefix, "alice") == 0)
        with client.stream("GET", bob_events, headers=BOB) as again:
            assert again.status_code == 200

        # The count is shared through Redis: slots another replica holds count, and the slots of a
        # replica that crashed (no longer renewed, so lapsed) do not.
        r = redis_server.client()
        now = time.time()
        r.zadd(f"{prefix}:streams:alice", {"other-replica": now + 60, "crashed-replica": now - 1})
        with client.stream("GET", alice_events, headers=ALICE) as one:
            assert one.status_code == 200
            assert_problem(client.get(alice_events, headers=ALICE), 429)
        wait_for(lambda: stream_count(redis_server, prefix, "alice") == 1)  # the lapsed one swept
        r.zrem(f"{prefix}:streams:alice", "other-replica")
        r.close()

        # A stream that ends with its job (here cancelled) gives its slot back too.
        with client.stream("GET", alice_events, headers=ALICE) as ending:
            assert stream_count(redis_server, prefix, "alice") == 1
            assert client.post(f"/v1/debates/{alice_job}/cancel", headers=ALICE).status_code == 200
            assert "event: job.cancelled" in ending.read().decode()
        wait_for(lambda: stream_count(redis_server, prefix, "alice") == 0)


@pytest.mark.slow
def test_150_open_streams_leave_requests_served(redis_server: RedisServer) -> None:
    settings = api_settings(redis_server.url, key_prefix="sse150", max_streams_per_key=200)
    with ApiServer(settings) as api:
        job_id = httpx.post(f"{api.url}/v1/debates", json=Q, headers=ALICE).json()["job_id"]
        timings = asyncio.run(_many_streams(api.url, f"/v1/debates/{job_id}/events", 150, redis_server))
    print(f"\nwith 150 open streams: {timings}")
    assert timings["streams_open"] == 150
    # Every stream sat in its blocking read while the requests were answered.
    assert timings["blocked_in_redis"] >= 150
    assert timings["healthz_status"] == 200 and timings["submit_status"] == 202
    assert timings["healthz_s"] < 2 and timings["submit_s"] < 2


async def _many_streams(url: str, path: str, n: int, redis_server: RedisServer) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    opened = 0
    readers: list[AsyncIterator[str]] = []
    async with httpx.AsyncClient(base_url=url, headers=ALICE, timeout=60, limits=limits) as client:
        async with contextlib.AsyncExitStack() as stack:

            async def open_one() -> None:
                nonlocal opened
                resp = await stack.enter_async_context(client.stream("GET", path))
                assert resp.status_code == 200, await resp.aread()
                # The first event (job.queued) proves the stream reads Redis; it then blocks there.
                # The line iterator is kept: a dropped one would close its response.
                lines = resp.aiter_lines()
                readers.append(lines)
                async for line in lines:
                    if line.startswith("event:"):
                        break
                opened += 1

            await asyncio.wait_for(asyncio.gather(*(open_one() for _ in range(n))), timeout=60)
            # Let every stream go round its blocking read at least once more.
            await asyncio.sleep(2.5)
            r = redis_server.client()
            blocked = int(r.info("clients")["blocked_clients"])
            r.close()
            started = time.monotonic()
            health = await client.get("/healthz")
            healthz_s = time.monotonic() - started
            started = time.monotonic()
            submit = await client.post("/v1/debates", json=Q)
            submit_s = time.monotonic() - started
        return {
            "streams_open": opened,
            "blocked_in_redis": blocked,
            "healthz_status": health.status_code,
            "healthz_s": round(healthz_s, 3),
            "submit_status": submit.status_code,
            "submit_s": round(submit_s, 3),
        }

"""An event stream that is open when Redis stops answering ends cleanly, telling the client when to
reconnect (an SSE ``retry`` of the 503's ``Retry-After``), instead of breaking off mid-response; the
client then resumes with ``Last-Event-ID`` and misses nothing.

A real redis-server (stopped with SIGSTOP: alive, connected, answering nothing, as across a network
partition) and the real app under uvicorn; no worker runs, so the job stays queued and its stream open.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import KEY_A, api_settings
from tests.api.support import ApiServer, RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Q = {"question": "What is the capital of France?", "config": {"knowledge": "none"}}
ALICE = {"Authorization": f"Bearer {KEY_A}"}


def test_an_open_stream_ends_cleanly_when_redis_hangs_and_resumes_after(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "hung").start()
    assert redis.proc is not None
    settings = api_settings(redis.url, redis_timeout_s=0.5, sse_block_ms=300, sse_ping_s=60)
    try:
        with ApiServer(settings) as api, httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client:
            ok = client.post("/v1/debates", json=Q)
            assert ok.status_code == 202
            events = f"{ok.headers['location']}/events"
            lines: list[str] = []
            ids: list[str] = []
            hung = False
            started = time.monotonic()
            with client.stream("GET", events, timeout=30) as resp:
                assert resp.status_code == 200
                for line in resp.iter_lines():  # a broken response would raise here
                    lines.append(line)
                    if line.startswith("id:"):
                        ids.append(line[3:].strip())
                    if ids and not hung:  # the stream is open and has read the queued event
                        os.kill(redis.proc.pid, signal.SIGSTOP)
                        hung = True
            took = time.monotonic() - started
            os.kill(redis.proc.pid, signal.SIGCONT)
            assert hung and ids, lines
            # It ended on its own, soon, with the reconnect hint last (the 503's Retry-After, in ms).
            assert "retry: 2000" in lines, lines
            assert [line for line in lines if line][-1] == "retry: 2000", lines
            assert took < 10, took
            # Resuming with the last id seen gives what came after it and nothing twice.
            client.post(f"{ok.headers['location']}/cancel")
            with client.stream("GET", events, headers={"Last-Event-ID": ids[-1]}, timeout=30) as resp:
                assert resp.status_code == 200
                more = [line[3:].strip() for line in resp.iter_lines() if line.startswith("id:")]
            assert more and not set(more) & set(ids), (ids, more)
            full = client.get(events, timeout=30).text
            assert [line[3:].strip() for line in full.splitlines() if line.startswith("id:")] == ids + more
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
        redis.stop()


def test_a_chat_stream_and_batch_results_end_cleanly_when_redis_hangs(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "hung").start()
    assert redis.proc is not None
    settings = api_settings(redis.url, redis_timeout_s=0.5, sse_block_ms=300, sse_ping_s=60)
    try:
        with ApiServer(settings) as api, httpx.Client(base_url=api.url, headers=ALICE, timeout=30) as client:
            batch = client.post("/v1/batches", json={"items": [{"question": f"q{i}?"} for i in range(3)]})
            assert batch.status_code == 202, batch.text
            chat = {
                "model": "parley-madke",
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "stream": True,
            }
            datas: list[str] = []
            with client.stream("POST", "/v1/chat/completions", json=chat, timeout=30) as resp:
                assert resp.status_code == 200
                for line in resp.iter_lines():  # a broken response would raise here
                    if line.startswith("data:"):
                        datas.append(line[5:].strip())
                        if len(datas) == 1:  # the role chunk: the job exists and its stream is open
                            os.kill(redis.proc.pid, signal.SIGSTOP)
            assert datas[-1] == "[DONE]", datas
            error = json.loads(datas[-2])["error"]
            assert error["code"] == "store_unavailable" and "GET /v1/debates/" in error["message"]

            # Batch results while Redis hangs: the response starts (or a 503), never breaks off.
            resp = client.get(f"/v1/batches/{batch.json()['batch_id']}/results", timeout=30)
            if resp.status_code == 200:
                last = json.loads(resp.text.splitlines()[-1])
                assert "unavailable" in last.get("error", "") or last.get("job_id"), last
            else:
                assert resp.status_code == 503 and resp.headers["retry-after"]
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
        redis.stop()

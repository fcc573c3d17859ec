"""The service's call cache (``PARLEY_WORKER_CALL_CACHE``, off by default): with it on, a debate asked
again is replayed from Redis by a real Celery worker, with no call reaching the model and no budget
charged; with it off every call reaches the model. A Redis store that cannot be reached is a miss."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from services.call_cache import RedisCallStore
from tests.api.conftest import KEY_A, KEY_B, api_settings
from tests.api.support import ApiServer, RedisServer, WorkerProcess, script_agreeing, wait_status, worker_env
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration

ASK = {"question": "Capital of France?", "config": {"knowledge": "none", "temperature": 0.7}}


def debate(client: httpx.Client) -> dict[str, Any]:
    accepted = client.post("/v1/debates", json=ASK)
    assert accepted.status_code == 202, accepted.text
    done = wait_status(client, accepted.json()["job_id"], {"completed", "failed"})
    assert done["status"] == "completed", done
    return done


@pytest.mark.parametrize("cache", [True, False])
def test_a_debate_asked_again_replays_only_with_the_cache_on(
    redis_server: RedisServer, tmp_path: Any, cache: bool
) -> None:
    redis_server.client().flushall()
    with ScriptedLLM() as llm:
        script_agreeing(llm)
        env = worker_env(
            redis_server.url, llm.base_url, PARLEY_WORKER_CALL_CACHE="true" if cache else "false"
        )
        with (
            ApiServer(api_settings(redis_server.url)) as api,
            WorkerProcess(env, tmp_path / "worker.log"),
            httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as alice,
        ):
            first = debate(alice)
            called = len(llm.requests)
            assert called > 0
            second = debate(alice)
            after_alice = len(llm.requests)
            # Another key's same debate reaches the model: replies are kept per key, so no key learns
            # from a replay that another asked the same.
            with httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30
            ) as bob:
                theirs = debate(bob)
            assert len(llm.requests) == after_alice + called
            assert not any(c["from_cache"] for c in theirs["result"]["transcript"])
    result = second["result"]
    if cache:
        assert after_alice == called  # nothing reached the model
        assert result["answer"] == first["result"]["answer"]
        assert [c["text"] for c in result["transcript"]] == [c["text"] for c in first["result"]["transcript"]]
        assert all(c["from_cache"] for c in result["transcript"])
        assert result["usage"]["from_cache_calls"] == result["usage"]["calls"] == called
        assert redis_server.client().zcard("parley:calls:order") == 2 * called  # alice's and bob's
    else:
        assert after_alice == 2 * called
        assert not any(c["from_cache"] for c in result["transcript"])
        assert redis_server.client().zcard("parley:calls:order") == 0


def test_the_redis_store_keeps_to_its_bound_and_an_outage_is_a_miss(redis_server: RedisServer) -> None:
    async def go() -> None:
        client = aioredis.Redis.from_url(redis_server.url)
        store = RedisCallStore(client, prefix="bound:", max_entries=5, ttl_s=60)
        for i in range(8):
            await store.put(f"k{i}", {"i": i})
        assert await store.get("k0") is None and await store.get("k7") == {"i": 7}
        assert await client.zcard("bound:calls:order") == 5
        await client.aclose()  # type: ignore[attr-defined]  # stubs predate redis 5
        gone = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
        down = RedisCallStore(gone, prefix="x:", max_entries=5, ttl_s=60)
        assert await down.get("k") is None
        await down.put("k", {"i": 1})  # kept nowhere, raises nothing
        assert down.errors == 2
        await gone.aclose()  # type: ignore[attr-defined]  # stubs predate redis 5

    asyncio.run(go())

"""Storage is per key: one key filling its share of Redis leaves every other key's writes working.

A real redis-server with ``maxmemory`` and ``noeviction`` (what a deployment runs), the gateway under
uvicorn and no worker (queued jobs stay stored, as they would behind a busy queue). The issue's attack:
one key posts large batches until Redis is full; before, every key then got 503 store-full.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import KEY_A, KEY_B, api_settings
from tests.api.support import ApiServer, RedisServer, running_redis

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAXMEMORY = 64 << 20
QUESTION = "Which of these is the capital? " + "x" * 1900


@pytest.fixture(scope="module")
def full_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    for server in running_redis(tmp_path_factory.mktemp("redis")):
        client = server.client()
        client.config_set("maxmemory", MAXMEMORY)
        client.config_set("maxmemory-policy", "noeviction")
        client.close()
        yield server


@pytest.fixture(scope="module")
def gateway(full_redis: RedisServer) -> Iterator[ApiServer]:
    # The default cap: a quarter of maxmemory per key.
    settings = api_settings(full_redis.url, max_batch_items=2_000, rate_limit_per_minute=10_000)
    with ApiServer(settings) as server:
        yield server


def used_memory(server: RedisServer) -> int:
    r = server.client()
    try:
        return int(r.info("memory")["used_memory"])
    finally:
        r.close()


def client(server: ApiServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def test_one_key_filling_its_share_leaves_other_keys_at_202(
    gateway: ApiServer, full_redis: RedisServer
) -> None:
    batch = {
        "items": [{"question": f"{QUESTION} {i}"} for i in range(400)],
        "config": {"knowledge": "none"},
    }
    with client(gateway, KEY_A) as alice, client(gateway, KEY_B) as bob:
        cap = alice.get("/v1/usage").json()["limits"]["storage_bytes"]
        assert cap == MAXMEMORY // 4
        memory_before = used_memory(full_redis)
        statuses = []
        for _ in range(20):
            resp = alice.post("/v1/batches", json=batch)
            statuses.append(resp.status_code)
            if resp.status_code != 202:
                break
        refused = resp
        assert refused.status_code == 429, refused.text
        problem = refused.json()
        assert problem["type"] == "/problems/storage-limit" and str(cap) in problem["detail"]
        assert int(refused.headers["retry-after"]) >= 1
        kept = alice.get("/v1/usage").json()["stored_bytes"]
        grew = used_memory(full_redis) - memory_before
        assert kept <= cap
        assert kept >= 0.95 * grew, (kept, grew)  # counted from above (within allocator noise)
        # Every other key keeps its share: single debates and a batch of its own are accepted.
        assert bob.post("/v1/debates", json={"question": "Who painted the Mona Lisa?"}).status_code == 202
        assert bob.post("/v1/batches", json=batch).status_code == 202
        # And alice can still read what she has.
        assert alice.get("/v1/batches").status_code == 200
    used = used_memory(full_redis)
    accepted = statuses.count(202)
    print(
        f"alice: {accepted} batches accepted, then 429 at {kept} counted bytes (cap {cap}; Redis grew "
        f"{grew} bytes for them); Redis {used} bytes used in all"
    )
    assert accepted >= 2 and used < MAXMEMORY


def test_a_request_larger_than_the_cap_is_413(full_redis: RedisServer) -> None:
    settings = api_settings(full_redis.url, key_prefix="small", storage_bytes_per_key=64 * 1024)
    with ApiServer(settings) as server, client(server, KEY_A) as alice:
        batch = {"items": [{"question": f"{QUESTION} {i}"} for i in range(100)]}
        resp = alice.post("/v1/batches", json=batch)
        assert resp.status_code == 413, resp.text
        assert resp.json()["type"] == "/problems/storage-limit"
        assert alice.post("/v1/debates", json={"question": "Who painted the Mona Lisa?"}).status_code == 202

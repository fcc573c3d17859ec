"""``GET /v1/debates`` and ``GET /v1/batches`` (the caller's recent work) and the ``/ui`` page's files.

A real redis-server and the real app over HTTP, no worker: submitted jobs simply stay queued, which
is all a listing needs.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from services.jobstore import BatchRecord, JobRecord, RedisJobStore, new_id
from services.jobstore.settings import DEFAULT_JOB_TTL_S
from tests.api.support import ApiServer, RedisServer

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
NO_KNOWLEDGE = {"knowledge": "none"}


def submit(client: httpx.Client, question: str, **config: Any) -> str:
    resp = client.post("/v1/debates", json={"question": question, "config": config or NO_KNOWLEDGE})
    assert resp.status_code == 202, resp.text
    job_id: str = resp.json()["job_id"]
    return job_id


def all_pages(client: httpx.Client, path: str, limit: int) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if before:
            params["before"] = before
        body = client.get(path, params=params).json()
        pages.append(body["items"])
        before = body["next_before"]
        if before is None:
            return pages


def test_debates_are_listed_newest_first_page_by_page_and_only_to_their_key(
    alice: httpx.Client, bob: httpx.Client
) -> None:
    mine = [submit(alice, f"Question number {i}?", protocol="single") for i in range(5)]
    theirs = submit(bob, "Bob's own question?")

    first = alice.get("/v1/debates", params={"limit": 2}).json()
    assert [j["job_id"] for j in first["items"]] == mine[::-1][:2]
    assert first["next_before"] == mine[3]
    top = first["items"][0]
    assert top["question"] == "Question number 4?"
    assert top["status"] == "queued" and top["protocol"] == "single" and top["batch_id"] is None
    assert top["created_at"] > 0

    listed = [j["job_id"] for page in all_pages(alice, "/v1/debates", 2) for j in page]
    assert listed[:5] == mine[::-1]
    assert theirs not in listed
    assert len(listed) == len(set(listed))
    bobs = [j["job_id"] for j in bob.get("/v1/debates").json()["items"]]
    assert theirs in bobs and not set(mine) & set(bobs)


def test_batches_are_listed_with_counts_and_their_items_among_the_debates(
    alice: httpx.Client, bob: httpx.Client
) -> None:
    items = [{"id": f"q{i}", "question": f"Batch question {i}?", "answers": ["x"]} for i in range(3)]
    resp = alice.post("/v1/batches", json={"items": items, "config": {**NO_KNOWLEDGE, "protocol": "society"}})
    assert resp.status_code == 202, resp.text
    batch_id = resp.json()["batch_id"]

    batches = alice.get("/v1/batches", params={"limit": 5}).json()["items"]
    assert batches[0]["batch_id"] == batch_id
    assert batches[0]["protocol"] == "society" and batches[0]["total"] == 3
    assert batches[0]["counts"]["queued"] == 3 and batches[0]["status"] == "queued"
    assert batches[0]["progress"] == 0
    assert batch_id not in [b["batch_id"] for b in bob.get("/v1/batches").json()["items"]]

    jobs = alice.get("/v1/debates", params={"limit": 3}).json()["items"]
    assert {j["batch_id"] for j in jobs} == {batch_id}
    assert sorted(j["item_id"] for j in jobs) == ["q0", "q1", "q2"]


def test_an_expired_job_is_skipped_and_the_page_filled_from_older_ones(
    alice: httpx.Client, redis_server: RedisServer
) -> None:
    ids = [submit(alice, f"Expiring {i}?") for i in range(4)]
    r = redis_server.client()
    try:
        r.delete(f"parley:job:{ids[2]}")  # what the TTL does to an old record
    finally:
        r.close()
    page = alice.get("/v1/debates", params={"limit": 3}).json()["items"]
    assert [j["job_id"] for j in page] == [ids[3], ids[1], ids[0]]
    r = redis_server.client()
    try:
        assert r.zscore("parley:owner:alice:jobs", ids[2]) is None  # dropped from the index
    finally:
        r.close()


def test_a_cursor_that_is_gone_gives_an_empty_page(alice: httpx.Client) -> None:
    submit(alice, "Anything?")
    body = alice.get("/v1/debates", params={"before": "job_unknown"}).json()
    assert body == {"items": [], "next_before": None}


@pytest.mark.parametrize("path", ["/v1/debates", "/v1/batches"])
@pytest.mark.parametrize("limit", ["0", "101", "many"])
def test_an_out_of_range_limit_is_a_422_problem(alice: httpx.Client, path: str, limit: str) -> None:
    resp = alice.get(path, params={"limit": limit})
    assert resp.status_code == 422
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = resp.json()
    assert body["type"] == "/problems/validation" and "limit" in body["detail"]


def test_listing_needs_a_key(api: ApiServer) -> None:
    resp = httpx.get(api.url + "/v1/debates")
    assert resp.status_code == 401
    assert resp.headers["content-type"].startswith(PROBLEM)


def test_openapi_documents_both_lists_with_their_models(alice: httpx.Client) -> None:
    spec = alice.get("/openapi.json").json()
    for path, model in (("/v1/debates", "DebateList"), ("/v1/batches", "BatchList")):
        get = spec["paths"][path]["get"]
        ref = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith(f"/{model}")
        assert {p["name"] for p in get["parameters"]} == {"limit", "before"}
    assert "post" in spec["paths"]["/v1/debates"]  # the list did not displace the submit route
    assert not any(p.startswith("/ui") for p in spec["paths"])


def test_the_page_and_its_assets_are_served_with_a_strict_policy(api: ApiServer) -> None:
    with httpx.Client(base_url=api.url) as client:
        root = client.get("/")
        assert root.status_code == 307 and root.headers["location"] == "/ui"
        page = client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="/ui/app.js"' in page.text and "<main" in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        js = client.get("/ui/app.js")
        assert js.headers["content-type"].startswith("text/javascript") and "textContent" in js.text
        assert "innerHTML" not in js.text  # no markup is ever built from data
        assert client.get("/ui/app.css").headers["content-type"].startswith("text/css")
        missing = client.get("/ui/secrets.txt")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith(PROBLEM)
        assert client.get("/ui/..%2Fsettings.py").status_code == 404


async def test_jobs_and_batches_removed_after_a_failed_enqueue_leave_the_lists(
    redis_server: RedisServer,
) -> None:
    """``delete_jobs`` (the rollback when queueing fails) takes the ids out of the listing indexes too."""
    store = RedisJobStore.from_url(redis_server.url, prefix="rollback", ttl_s=DEFAULT_JOB_TTL_S)
    try:
        jobs = [
            JobRecord(job_id=new_id("job"), owner="carol", question=f"Q{i}?", batch_id="bat_x")
            for i in range(3)
        ]
        await store.create_jobs(jobs, BatchRecord(batch_id="bat_x", owner="carol", total=3))
        assert [j.job_id for j in await store.list_jobs("carol", 10)] == sorted(
            (j.job_id for j in jobs), reverse=True
        )
        assert [b.batch_id for b in await store.list_batches("carol", 10)] == ["bat_x"]
        await store.delete_jobs([j.job_id for j in jobs], "bat_x")
        assert await store.list_jobs("carol", 10) == []
        assert await store.list_batches("carol", 10) == []
        assert await store.redis.zcard(store.k_owner_jobs("carol")) == 0
    finally:
        await store.aclose()

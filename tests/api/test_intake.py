"""The gateway without workers: validation, limits, problem+json, auth, idempotency, 503 on Redis down.

A real redis-server and the real app over HTTP; messages simply stay in the broker queues, which the
tests inspect to prove that rejected input queued nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.settings import ApiSettings
from tests.api.conftest import KEY_A, api_settings
from tests.api.support import ApiServer, RedisServer

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
Q = {"question": "What is the capital of France?", "config": {"knowledge": "none"}}


def queued_messages(redis_server: RedisServer) -> int:
    r = redis_server.client()
    try:
        return int(r.llen("parley.interactive")) + int(r.llen("parley.batch"))
    finally:
        r.close()


def assert_problem(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body: dict[str, object] = resp.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def test_submit_returns_202_with_location_and_job_is_readable(alice: httpx.Client) -> None:
    resp = alice.post("/v1/debates", json=Q)
    assert resp.status_code == 202
    body = resp.json()
    assert body["status"] == "queued"
    assert resp.headers["location"] == f"/v1/debates/{body['job_id']}" == body["location"]
    job = alice.get(resp.headers["location"]).json()
    assert job["status"] == "queued"
    assert job["question"] == Q["question"]
    assert job["progress"] == {"round": 0, "rounds": 3}
    assert job["result"] is None


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ('{"question": "x", ', 400, "JSON"),
        ('{"question": 12}', 422, "question"),
        ('{"question": "q", "config": {"protocol": "telepathy"}}', 422, "protocol"),
        ('{"question": "q", "config": {"agents": 99}}', 422, "agents"),
        ('{"question": "q", "config": {"rounds": 11}}', 422, "rounds"),
        ('{"question": "q", "config": {"protocol": "madke", "agents": 1}}', 422, "2 agents"),
        ('{"question": "   "}', 422, "empty"),
        ('{"question": "q", "colour": "red"}', 422, "colour"),
    ],
)
def test_bad_input_is_problem_json_and_queues_nothing(
    alice: httpx.Client, redis_server: RedisServer, body: str, status: int, needle: str
) -> None:
    before = queued_messages(redis_server)
    resp = alice.post("/v1/debates", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(resp, status)
    assert needle.lower() in json.dumps(problem).lower()
    assert queued_messages(redis_server) == before


def test_a_mallm_vote_after_more_turns_than_rounds_is_accepted(alice: httpx.Client, api: ApiServer) -> None:
    # held after the last turn (the engine's test: tests/engine/protocols/test_mallm.py), so not refused
    cfg = {"protocol": "mallm", "rounds": 2, "mallm": {"decision": "simple", "vote_after": 5}}
    assert alice.post("/v1/debates", json={"question": "a?", "config": cfg}).status_code == 202
    spec = httpx.get(f"{api.url}/openapi.json").json()
    vote_after = spec["components"]["schemas"]["MallmSettings"]["properties"]["vote_after"]
    assert "after the last turn" in vote_after["description"]


def test_unknown_id_is_404_problem(alice: httpx.Client) -> None:
    assert_problem(alice.get("/v1/debates/job_doesnotexist"), 404)
    assert_problem(alice.get("/v1/batches/bat_doesnotexist"), 404)
    assert_problem(alice.delete("/v1/debates/job_doesnotexist"), 404)


def test_auth_required_and_keys_isolated(api: ApiServer, alice: httpx.Client, bob: httpx.Client) -> None:
    anon = httpx.post(f"{api.url}/v1/debates", json=Q)
    assert_problem(anon, 401)
    assert anon.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.post(f"{api.url}/v1/debates", json=Q, headers={"Authorization": "Bearer nope"})
    assert_problem(wrong, 401)

    job_id = alice.post("/v1/debates", json=Q).json()["job_id"]
    assert alice.get(f"/v1/debates/{job_id}").status_code == 200
    assert_problem(bob.get(f"/v1/debates/{job_id}"), 404)
    assert_problem(bob.get(f"/v1/debates/{job_id}/events"), 404)
    assert_problem(bob.delete(f"/v1/debates/{job_id}"), 404)
    assert alice.get(f"/v1/debates/{job_id}").json()["status"] == "queued"  # bob's DELETE did nothing

    batch_id = alice.post("/v1/batches", json={"items": [{"question": "a?"}]}).json()["batch_id"]
    assert_problem(bob.get(f"/v1/batches/{batch_id}"), 404)
    assert_problem(bob.get(f"/v1/batches/{batch_id}/results"), 404)


def test_idempotency_key_replays_first_response(alice: httpx.Client, redis_server: RedisServer) -> None:
    key = f"idem-{time.time_ns()}"
    first = alice.post("/v1/debates", json=Q, headers={"Idempotency-Key": key})
    before = queued_messages(redis_server)
    again = alice.post("/v1/debates", json=Q, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    assert queued_messages(redis_server) == before  # the replay queued nothing

    other = alice.post("/v1/debates", json={**Q, "question": "Another?"}, headers={"Idempotency-Key": key})
    assert_problem(other, 422)

    batch = {"items": [{"question": "one?"}, {"question": "two?"}]}
    b1 = alice.post("/v1/batches", json=batch, headers={"Idempotency-Key": key + "-b"})
    b2 = alice.post("/v1/batches", json=batch, headers={"Idempotency-Key": key + "-b"})
    assert b1.status_code == b2.status_code == 202
    assert b1.json()["batch_id"] == b2.json()["batch_id"]
    # The same items uploaded as JSONL (a new multipart boundary each time) replay too.
    jsonl = b'{"question": "one?"}\n{"question": "two?"}\n'
    u1, u2 = (
        alice.post("/v1/batches", files={"file": ("b.jsonl", jsonl)}, headers={"Idempotency-Key": key + "-u"})
        for _ in range(2)
    )
    assert u1.status_code == u2.status_code == 202
    assert u1.json()["batch_id"] == u2.json()["batch_id"] and u2.headers["idempotent-replayed"] == "true"


def test_batch_json_and_jsonl_accepted_with_counts(alice: httpx.Client, redis_server: RedisServer) -> None:
    before = queued_messages(redis_server)
    items = [{"id": f"q{i}", "question": f"Question number {i}?", "answers": [str(i)]} for i in range(5)]
    resp = alice.post("/v1/batches", json={"items": items, "config": {"rounds": 2}})
    assert resp.status_code == 202
    body = resp.json()
    assert body["total"] == 5 and resp.headers["location"] == f"/v1/batches/{body['batch_id']}"
    assert queued_messages(redis_server) == before + 5
    status = alice.get(f"/v1/batches/{body['batch_id']}").json()
    assert status["counts"]["queued"] == 5 and status["progress"] == 0.0 and status["status"] == "queued"
    assert status["config"]["rounds"] == 2

    jsonl = "\n".join(json.dumps(i) for i in items).encode()
    up = alice.post(
        "/v1/batches",
        files={"file": ("b.jsonl", jsonl, "application/x-ndjson")},
        data={"config": json.dumps({"agents": 3})},
    )
    assert up.status_code == 202, up.text
    lines = [
        json.loads(x) for x in alice.get(f"/v1/batches/{up.json()['batch_id']}/results").text.splitlines()
    ]
    assert [x["id"] for x in lines] == [f"q{i}" for i in range(5)]
    assert [x["index"] for x in lines] == list(range(5))
    assert all(x["status"] == "queued" and x["result"] is None for x in lines)
    assert lines[3]["answers"] == ["3"]


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        (['{"question": "ok?"}', '{"question": "broken'], "line"),
        (['{"question": "ok?"}', '{"question": 5}'], "line"),
        (['{"question": "ok?"}', '{"question": "' + "x" * 3000 + '"}'], "limit"),
        (['{"id": "a", "question": "ok?"}', '{"id": "a", "question": "dup?"}'], "duplicate"),
        ([json.dumps({"question": f"q{i}?"}) for i in range(101)], "limit is 100"),
        ([], "no items"),
    ],
)
def test_bad_batch_is_rejected_whole(
    alice: httpx.Client, redis_server: RedisServer, tmp_path: Path, lines: list[str], needle: str
) -> None:
    r = redis_server.client()
    jobs_before = len(r.keys("parley:job:*"))
    before = queued_messages(redis_server)
    resp = alice.post(
        "/v1/batches", files={"file": ("b.jsonl", "\n".join(lines).encode(), "application/x-ndjson")}
    )
    problem = assert_problem(resp, 422)
    assert needle in json.dumps(problem)
    assert queued_messages(redis_server) == before
    assert len(r.keys("parley:job:*")) == jobs_before
    r.close()


def test_batch_with_bad_config_or_body(alice: httpx.Client) -> None:
    assert_problem(
        alice.post("/v1/batches", json={"items": [{"question": "a?"}], "config": {"rounds": 0}}), 422
    )
    assert_problem(
        alice.post("/v1/batches", content=b"[1,2", headers={"content-type": "application/json"}), 400
    )
    assert_problem(alice.post("/v1/batches", content=b"x", headers={"content-type": "text/csv"}), 415)
    assert_problem(alice.post("/v1/batches", json=[{"question": "a?"}]), 422)


def test_truth_last_is_refused_without_gold_answers(alice: httpx.Client, redis_server: RedisServer) -> None:
    cfg = {"protocol": "society", "ordering": "truth_last"}
    before = queued_messages(redis_server)
    body = assert_problem(alice.post("/v1/debates", json={"question": "a?", "config": cfg}), 422)
    assert "truth_last" in str(body["detail"]) or "truth_last" in json.dumps(body)
    items: list[dict[str, Any]] = [{"question": "a?", "answers": ["x"]}, {"question": "b?"}]
    body = assert_problem(alice.post("/v1/batches", json={"items": items, "config": cfg}), 422)
    assert "missing at [2]" in str(body["detail"])
    jsonl = b'{"question": "a?", "answers": ["x"]}\n{"question": "b?"}\n'
    files = {"file": ("b.jsonl", jsonl, "application/jsonl")}
    assert_problem(alice.post("/v1/batches", files=files, data={"config": json.dumps(cfg)}), 422)
    assert queued_messages(redis_server) == before
    items[1]["answers"] = ["y"]
    assert alice.post("/v1/batches", json={"items": items, "config": cfg}).status_code == 202


def test_body_size_limit_is_413(alice: httpx.Client) -> None:
    big = {"question": "q?", "answers": ["x" * (2 << 20)]}
    assert_problem(alice.post("/v1/debates", json=big), 413)


def test_docs_and_openapi(api: ApiServer) -> None:
    assert httpx.get(f"{api.url}/docs").status_code == 200
    spec = httpx.get(f"{api.url}/openapi.json").json()
    assert {
        "/v1/debates",
        "/v1/debates/{job_id}/events",
        "/v1/batches",
        "/v1/batches/{batch_id}/results",
    } <= set(spec["paths"])
    assert httpx.get(f"{api.url}/healthz").json() == {"status": "ok"}


def test_rate_and_queue_limits_answer_429_with_retry_after(redis_server: RedisServer) -> None:
    settings = api_settings(redis_server.url, rate_limit_per_minute=3, key_prefix="ratetest")
    with ApiServer(settings) as server:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        codes = [
            httpx.post(f"{server.url}/v1/debates", json=Q, headers=headers).status_code for _ in range(4)
        ]
        assert codes == [202, 202, 202, 429]
        resp = httpx.get(f"{server.url}/v1/debates/x", headers=headers)
        assert_problem(resp, 429)
        assert 1 <= int(resp.headers["retry-after"]) <= 61

    settings = api_settings(redis_server.url, max_active_jobs_per_key=3, key_prefix="queuetest")
    with ApiServer(settings) as server:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        assert httpx.post(f"{server.url}/v1/debates", json=Q, headers=headers).status_code == 202
        items = {"items": [{"question": f"{i}?"} for i in range(3)]}
        resp = httpx.post(f"{server.url}/v1/batches", json=items, headers=headers)
        assert_problem(resp, 429)
        assert "retry-after" in resp.headers


def test_redis_down_is_503_with_retry_after(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "r").start()
    settings: ApiSettings = api_settings(redis.url, redis_timeout_s=1.0)
    with ApiServer(settings) as server:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        ok = httpx.post(f"{server.url}/v1/debates", json=Q, headers=headers)
        assert ok.status_code == 202
        redis.stop()
        for method, path in [("POST", "/v1/debates"), ("GET", ok.headers["location"]), ("GET", "/healthz")]:
            resp = httpx.request(method, f"{server.url}{path}", json=Q, headers=headers, timeout=30)
            assert_problem(resp, 503)
            assert resp.headers["retry-after"] == "2"
        upload = httpx.post(
            f"{server.url}/v1/batches", json={"items": [{"question": "a?"}]}, headers=headers, timeout=30
        )
        assert_problem(upload, 503)


def test_a_search_query_mode_the_operator_did_not_enable_is_refused(redis_server: RedisServer) -> None:
    """PARLEY_API_SEARCH_QUERY_MODES bounds what a client may pick by name (never the prompt): a
    refused mode is a 422 naming the field, at submission, and the schema lists only the enabled."""
    settings = api_settings(redis_server.url, search_query_modes=["question"], key_prefix="searchmodes")
    passage = {"question": "Who painted the Mona Lisa?", "config": {"search_query": "passage"}}
    with ApiServer(settings) as server:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        before = queued_messages(redis_server)
        body = assert_problem(httpx.post(f"{server.url}/v1/debates", json=passage, headers=headers), 422)
        assert body["detail"] == (
            "config.search_query: search_query 'passage' is not enabled on this deployment "
            "(enabled: question)"
        )
        batch = {"items": [{"question": "a?"}], "config": {"search_query": "passage"}}
        assert_problem(httpx.post(f"{server.url}/v1/batches", json=batch, headers=headers), 422)
        assert queued_messages(redis_server) == before
        spec = httpx.get(f"{server.url}/openapi.json").json()
        assert spec["components"]["schemas"]["DebateConfig"]["properties"]["search_query"]["enum"] == [
            "question"
        ]
        asked = {**passage, "config": {"search_query": "question"}}
        assert httpx.post(f"{server.url}/v1/debates", json=asked, headers=headers).status_code == 202


def test_searches_during_the_debate_are_bounded_by_the_operator(redis_server: RedisServer) -> None:
    """PARLEY_API_MAX_DEBATE_SEARCHES caps debate_search.per_agent: above it a 422 naming the field at
    submission (nothing queued), the schema's maximum says it, and within it the job is accepted."""
    settings = api_settings(redis_server.url, max_debate_searches=1, key_prefix="searchcap")
    many = {"question": "Who painted the Mona Lisa?", "config": {"debate_search": {"per_agent": 3}}}
    with ApiServer(settings) as server:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        before = queued_messages(redis_server)
        body = assert_problem(httpx.post(f"{server.url}/v1/debates", json=many, headers=headers), 422)
        assert body["detail"] == (
            "config.debate_search.per_agent: 3 searches per debater is above this deployment's limit of 1"
        )
        assert queued_messages(redis_server) == before
        spec = httpx.get(f"{server.url}/openapi.json").json()
        assert (
            spec["components"]["schemas"]["DebateSearchSettings"]["properties"]["per_agent"]["maximum"] == 1
        )
        one = {**many, "config": {"debate_search": {"per_agent": 1}}}
        assert httpx.post(f"{server.url}/v1/debates", json=one, headers=headers).status_code == 202
        rag = {**many, "config": {"protocol": "rag", "debate_search": {"per_agent": 1}}}
        refused = assert_problem(httpx.post(f"{server.url}/v1/debates", json=rag, headers=headers), 422)
        assert "debate_search" in str(refused["detail"])


def test_the_passage_mode_is_enabled_by_default_for_protocols_with_a_pool(
    alice: httpx.Client, api: ApiServer
) -> None:
    question = "Who painted the Mona Lisa?"
    accepted = alice.post("/v1/debates", json={"question": question, "config": {"search_query": "passage"}})
    assert accepted.status_code == 202, accepted.text
    assert alice.get(accepted.headers["location"]).json()["config"]["search_query"] == "passage"
    cot = {"protocol": "cot", "search_query": "passage"}
    body = assert_problem(alice.post("/v1/debates", json={"question": question, "config": cot}), 422)
    assert "search_query" in json.dumps(body)
    schema = httpx.get(f"{api.url}/openapi.json").json()["components"]["schemas"]["DebateConfig"]
    assert schema["properties"]["search_query"]["enum"] == ["question", "passage"]

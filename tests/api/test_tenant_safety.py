"""What a key holder can and cannot ask of the gateway: endpoints by name only, every setting honoured
or refused, budgets and daily token quotas, failed-authentication limits, closed by default.

A real redis-server and the real app over HTTP, without workers: messages stay in the broker queues,
which the tests inspect to prove that a refused request queued nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import KEY_A, KEY_B, api_settings
from tests.api.support import ROOT, ApiServer, RedisServer
from tests.api.test_intake import assert_problem, queued_messages
from tests.support.scripted_llm import free_port

pytestmark = pytest.mark.integration

BUDGET = 1000
Q = {"question": "Who painted the Mona Lisa?"}


def job_count(redis_server: RedisServer) -> int:
    r = redis_server.client()
    try:
        return sum(1 for k in r.scan_iter("parley:job:*") if k.count(":") == 2)
    finally:
        r.close()


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer) -> Iterator[ApiServer]:
    settings = api_settings(
        redis_server.url,
        llm_endpoints=["small", "big"],
        budget_tokens_default=BUDGET,
        budget_tokens_max=5 * BUDGET,
        daily_token_quotas={"bob": 3 * BUDGET},
        auth_failures_per_minute=3,
    )
    with ApiServer(settings) as server:
        yield server


def client(server: ApiServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (
            {"protocol": "society", "team": [{"base_url": "http://127.0.0.1:9/v1", "model": "x"}, {}]},
            "config.team.0.base_url",
        ),
        ({"team": [{}, {"base_url": "http://169.254.169.254/latest"}]}, "config.team.1.base_url"),
        ({"team": [{"model": "gpt-4-32k"}, {}]}, "config.team.0.model"),
        ({"team": [{"endpoint": "small"}, {"endpoint": "huge"}]}, "config.team.1.endpoint"),
        ({"budget_tokens": 6 * BUDGET}, "config.budget_tokens"),
        ({"budget_calls": 5000}, "config.budget_calls"),
        ({"protocol": "society", "judge": "rule"}, "judge"),
        ({"protocol": "single", "rounds": 2}, "rounds"),
        ({"protocol": "madke", "depth": 2}, "depth"),
    ],
)
def test_refused_config_names_the_field_and_stores_nothing(
    gateway: ApiServer, redis_server: RedisServer, config: dict[str, Any], field: str
) -> None:
    before_q, before_jobs = queued_messages(redis_server), job_count(redis_server)
    with client(gateway, KEY_A) as alice:
        resp = alice.post("/v1/debates", json={**Q, "config": config})
        problem = assert_problem(resp, 422)
        assert field in str(problem["detail"])
        batch = alice.post("/v1/batches", json={"items": [Q, Q], "config": config})
        assert field.removeprefix("config.") in str(assert_problem(batch, 422)["detail"])
    assert queued_messages(redis_server) == before_q and job_count(redis_server) == before_jobs


def test_named_endpoints_and_teams_are_accepted_with_budgets_filled_in(gateway: ApiServer) -> None:
    team = [{"endpoint": "small", "temperature": 0.2, "persona": "historian"}, {"endpoint": "big"}]
    with client(gateway, KEY_A) as alice:
        resp = alice.post("/v1/debates", json={**Q, "config": {"team": team, "budget_calls": 12}})
        assert resp.status_code == 202, resp.text
        stored = alice.get(resp.headers["location"]).json()["config"]
    assert stored["team"][0]["endpoint"] == "small" and stored["team"][1]["endpoint"] == "big"
    assert stored["budget_calls"] == 12  # the client asked for less than the default
    assert stored["budget_tokens"] == BUDGET  # the operator's default


def test_client_urls_only_where_the_operator_allows_them(redis_server: RedisServer) -> None:
    settings = api_settings(
        redis_server.url, allow_client_urls=True, key_prefix="open", client_url_networks=["127.0.0.0/8"]
    )
    config = {"team": [{"base_url": "http://127.0.0.1:9/v1", "model": "mine"}, {}]}
    with ApiServer(settings) as server, client(server, KEY_A) as alice:
        resp = alice.post("/v1/debates", json={**Q, "config": config})
        assert resp.status_code == 202, resp.text  # a network the operator listed
        public = {"team": [{"base_url": "https://llm.example.org/v1", "model": "mine"}, {}]}
        assert alice.post("/v1/debates", json={**Q, "config": public}).status_code == 202
        # Every other non-public address is refused: metadata service, private ranges, local names.
        for url in (
            "http://169.254.169.254/latest",
            "http://10.0.0.5:8000/v1",
            "http://[::1]:80/v1",
            "http://localhost:8000/v1",
            "http://redis.internal:6379",
        ):
            refused = alice.post(
                "/v1/debates", json={**Q, "config": {"team": [{"base_url": url, "model": "m"}, {}]}}
            )
            assert "config.team.0.base_url" in str(assert_problem(refused, 422)["detail"]), url
        # A model on an operator endpoint is still the operator's choice.
        bad = alice.post("/v1/debates", json={**Q, "config": {"team": [{"model": "x"}, {}]}})
        assert "config.team.0.model" in str(assert_problem(bad, 422)["detail"])


def test_daily_token_quota_reserves_refuses_with_retry_after_and_releases(
    gateway: ApiServer, redis_server: RedisServer
) -> None:
    with client(gateway, KEY_B) as bob:
        first = bob.post("/v1/debates", json=Q)
        second = bob.post("/v1/batches", json={"items": [Q, Q]})
        assert first.status_code == 202 and second.status_code == 202
        usage = bob.get("/v1/usage").json()
        assert usage["today"]["reserved"] == 3 * BUDGET and usage["remaining_today"] == 0
        assert usage["limits"]["daily_token_quota"] == 3 * BUDGET
        before_q, before_jobs = queued_messages(redis_server), job_count(redis_server)
        refused = bob.post("/v1/debates", json=Q)
        problem = assert_problem(refused, 429)
        assert problem["type"] == "/problems/quota-exceeded"
        retry = int(refused.headers["retry-after"])
        assert 0 < retry <= 86401
        refused_batch = bob.post("/v1/batches", json={"items": [Q]})
        assert_problem(refused_batch, 429)
        assert queued_messages(redis_server) == before_q and job_count(redis_server) == before_jobs
        # A cancelled job gives its reservation back; a smaller budget then fits.
        assert bob.post(first.headers["location"] + "/cancel").status_code == 200
        assert bob.get("/v1/usage").json()["today"]["reserved"] == 2 * BUDGET
        small = bob.post("/v1/debates", json={**Q, "config": {"budget_tokens": BUDGET // 2}})
        assert small.status_code == 202, small.text
        assert bob.get("/v1/usage").json()["remaining_today"] == BUDGET // 2
    with client(gateway, KEY_A) as alice:  # quotas are per key: alice has none
        assert alice.get("/v1/usage").json()["limits"]["daily_token_quota"] is None


def test_failed_authentications_are_limited_per_address(redis_server: RedisServer) -> None:
    settings = api_settings(redis_server.url, auth_failures_per_minute=3, key_prefix="authfail")
    with ApiServer(settings) as server:
        with client(server, KEY_A) as alice:  # alice's key was used from this address before
            assert alice.get("/v1/usage").status_code == 200
        codes = [client(server, f"guess-{i}").get("/v1/usage").status_code for i in range(3)]
        assert codes == [401, 401, 401]
        blocked = client(server, "guess-4").get("/v1/usage")
        assert_problem(blocked, 429)
        assert int(blocked.headers["retry-after"]) >= 1
        with client(server, KEY_A) as alice:  # a key in use behind the same address keeps working
            assert alice.get("/v1/usage").status_code == 200
        with client(server, KEY_B) as bob:  # a key never seen here counts as a guess until the minute ends
            assert_problem(bob.get("/v1/usage"), 429)


def test_keys_are_isolated_in_usage(gateway: ApiServer) -> None:
    with client(gateway, KEY_A) as alice, client(gateway, KEY_B) as bob:
        assert alice.get("/v1/usage").json()["owner"] == "alice"
        assert bob.get("/v1/usage").json()["owner"] == "bob"


def _serve(env: dict[str, str], host: str, port: int) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    return subprocess.Popen(
        [sys.executable, "-m", "api.cli", "api", "--host", host, "--port", str(port)],
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _answers(port: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return True
        except httpx.HTTPError:
            time.sleep(0.2)
    return False


def test_closed_by_default_without_keys(redis_server: RedisServer, tmp_path: Path) -> None:
    env = {"PARLEY_API_REDIS_URL": redis_server.url}
    exposed = _serve(env, "0.0.0.0", free_port())
    out, _ = exposed.communicate(timeout=60)
    assert exposed.returncode == 2
    assert b"refusing to serve on 0.0.0.0 without API keys" in out
    # Loopback without keys, and an explicit anonymous mode, do serve.
    for host, extra in (("127.0.0.1", {}), ("0.0.0.0", {"PARLEY_API_ANONYMOUS": "true"})):
        port = free_port()
        proc = _serve({**env, **extra}, host, port)
        try:
            assert _answers(port), proc.stdout.read() if proc.stdout else b""
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def test_openapi_documents_the_usage_route(gateway: ApiServer) -> None:
    doc = httpx.get(f"{gateway.url}/openapi.json").json()
    assert "/v1/usage" in doc["paths"]
    assert json.dumps(doc).count("sk-") == 0

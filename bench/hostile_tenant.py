"""The hostile-tenant attacks, measured from outside through HTTP only.

A real redis-server (maxmemory 256 MB, noeviction), the gateway under uvicorn, a real Celery worker and
the scripted LLM, which counts the tokens it serves (what a provider would bill). Each attack prints
what the attacker got and what it cost the operator; the JSON lines go to ``--out``.

    .venv/bin/python -m bench.hostile_tenant [--out reports/security/hostile-tenant.jsonl]
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from api.guards import hash_key
from api.settings import ApiSettings
from bench.harness.scripted import agreeing_debate
from parley_testing.processes import ApiServer, RedisServer, WorkerProcess, worker_env
from parley_testing.scripted_llm import ScriptedLLM, free_port

KEYS = {"alice": "alice-key-0123456789abcdef", "bob": "bob-key-0123456789abcdef", "carol": "carol-key-0123"}
Q = "What is the capital of France?"


class Stack:
    def __init__(self, redis: RedisServer, llm: ScriptedLLM, api: ApiServer) -> None:
        self.redis, self.llm, self.api = redis, llm, api

    def client(self, owner: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {KEYS[owner]}"}
        return httpx.Client(base_url=self.api.url, headers=headers, timeout=120)

    def counters(self, c: httpx.Client) -> tuple[int, int, int]:
        """Tokens the LLM has served, tokens ``c``'s key has been charged today, and calls the LLM has
        been asked so far: an attack's cost is what they grew by."""
        return self.llm.tokens_served, charged_today(c), len(self.llm.requests)

    def wait(
        self, c: httpx.Client, job_id: str, statuses: set[str], timeout_s: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            body: dict[str, Any] = c.get(f"/v1/debates/{job_id}").json()
            if body["status"] in statuses or time.monotonic() > deadline:
                return body
            time.sleep(0.05)


def charged_today(c: httpx.Client) -> int:
    """Tokens charged today to ``c``'s key (``/v1/usage``)."""
    return int(c.get("/v1/usage").json()["today"]["tokens"])


def submit(c: httpx.Client, config: dict[str, Any]) -> str:
    """The question debated with ``config``; its job id."""
    return str(c.post("/v1/debates", json={"question": Q, "config": config}).json()["job_id"])


def budget_attack(stack: Stack, config: dict[str, Any], budget: int) -> dict[str, Any]:
    with stack.client("alice") as alice:
        served0, used0, calls0 = stack.counters(alice)
        job_id = submit(alice, {**config, "budget_tokens": budget})
        job = stack.wait(alice, job_id, {"completed", "failed"})
        used = charged_today(alice) - used0
    served = stack.llm.tokens_served - served0
    return {
        "budget_tokens": budget,
        "calls": len(stack.llm.requests) - calls0,
        "served_tokens": served,
        "x_budget": round(served / budget, 2),
        "charged_tokens": used,
        "status": job["status"],
        "answer_source": (job.get("result") or {}).get("answer_source"),
    }


def quota_attack(stack: Stack) -> dict[str, Any]:
    config = {"protocol": "self_consistency", "samples": 20, "max_tokens": 32, "budget_tokens": 2_000}
    served0 = stack.llm.tokens_served
    with stack.client("bob") as bob:
        with ThreadPoolExecutor(15) as pool:
            responses = list(
                pool.map(lambda _: bob.post("/v1/debates", json={"question": Q, "config": config}), range(15))
            )
        accepted = [r.json()["job_id"] for r in responses if r.status_code == 202]
        for job_id in accepted:
            stack.wait(bob, job_id, {"completed", "failed"})
        today = bob.get("/v1/usage").json()["today"]
    return {
        "quota": 20_000,
        "submitted": 15,
        "admitted": len(accepted),
        "refused_429": sum(r.status_code == 429 for r in responses),
        "served_tokens": stack.llm.tokens_served - served0,
        "usage_tokens": today["tokens"],
        "usage_reserved_after": today["reserved"],
    }


def cancel_attack(stack: Stack) -> dict[str, Any]:
    stack.llm.latency_s = 0.5
    try:
        with stack.client("carol") as carol:
            served0, used0, calls0 = stack.counters(carol)
            job_id = submit(carol, {"agents": 3, "rounds": 3, "knowledge": "none"})
            while len(stack.llm.requests) - calls0 < 5:
                time.sleep(0.02)
            carol.delete(f"/v1/debates/{job_id}")
            time.sleep(2.0)
            used = charged_today(carol) - used0
    finally:
        stack.llm.latency_s = 0.02
    return {
        "calls_sent": len(stack.llm.requests) - calls0,
        "served_tokens": stack.llm.tokens_served - served0,
        "charged_tokens": used,
    }


def failed_attack(stack: Stack) -> dict[str, Any]:
    stack.llm.latency_s = 0.2
    try:
        with stack.client("carol") as carol:
            served0, used0, calls0 = stack.counters(carol)
            job_id = submit(carol, {"knowledge": "none"})
            while len(stack.llm.requests) - calls0 < 2:
                time.sleep(0.01)
            stack.llm.fail_for(30, status=400)
            job = stack.wait(carol, job_id, {"failed", "completed"})
            used = charged_today(carol) - used0
    finally:
        stack.llm.fail_for(0)
        stack.llm.latency_s = 0.02
    return {
        "status": job["status"],
        "served_tokens": stack.llm.tokens_served - served0,
        "charged_tokens": used,
    }


def unauthenticated_upload(stack: Stack) -> dict[str, Any]:
    host, port = stack.api.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/batches HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {32 << 20}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(head.encode())
        reply = sock.recv(4096)
    return {
        "status_line": reply.split(b"\r\n")[0].decode(),
        "answered_after_ms": round((time.monotonic() - started) * 1000, 1),
    }


def wrong_keys(stack: Stack) -> dict[str, Any]:
    with httpx.Client(base_url=stack.api.url, timeout=30) as anyone:
        valid = {"Authorization": f"Bearer {KEYS['alice']}"}
        before = anyone.get("/v1/usage", headers=valid).status_code
        same = [
            anyone.get("/v1/usage", headers={"Authorization": "Bearer wrong"}).status_code for _ in range(300)
        ]
        guesses = [
            anyone.get("/v1/usage", headers={"Authorization": f"Bearer guess-{i}"}).status_code
            for i in range(300)
        ]
        after = anyone.get("/v1/usage", headers=valid).status_code
    return {
        "valid_key_before": before,
        "same_wrong_key_x300": sorted(set(same)),
        "distinct_wrong_keys_x300": {str(s): guesses.count(s) for s in sorted(set(guesses))},
        "valid_key_after": after,
    }


def storage_attack(stack: Stack) -> dict[str, Any]:
    batch = {
        "items": [{"question": f"{'x' * 1900} {i}?"} for i in range(2_000)],
        "config": {"knowledge": "none"},
    }
    statuses = []
    with stack.client("alice") as alice, stack.client("carol") as carol:
        for _ in range(20):
            resp = alice.post("/v1/batches", json=batch)
            statuses.append(resp.status_code)
            if resp.status_code != 202:
                break
        kept = alice.get("/v1/usage").json()["stored_bytes"]
        other = carol.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none"}}).status_code
        cap = alice.get("/v1/usage").json()["limits"]["storage_bytes"]
    return {
        "alice_batches": statuses,
        "alice_refusal": resp.json().get("type"),
        "alice_stored_bytes": kept,
        "cap_bytes": cap,
        "other_key_submission": other,
    }


def metrics_public(stack: Stack) -> dict[str, Any]:
    return {"public_port_metrics": httpx.get(f"{stack.api.url}/metrics", timeout=10).status_code}


def lost_message(stack: Stack, tmp: Path) -> dict[str, Any]:
    """A job queued while no worker runs, its message deleted; then a worker with a 1 s orphan age."""
    settings = ApiSettings(
        redis_url=stack.redis.url,
        keys={k: hash_key(v) for k, v in KEYS.items()},
        key_prefix="lost",
        metrics_port=0,
    )
    with (
        ApiServer(settings) as api,
        httpx.Client(
            base_url=api.url, headers={"Authorization": f"Bearer {KEYS['alice']}"}, timeout=30
        ) as alice,
    ):
        job_id = alice.post("/v1/debates", json={"question": Q, "config": {"knowledge": "none"}}).json()[
            "job_id"
        ]
        r = stack.redis.client()
        r.delete("parley.interactive", "parley.batch")
        r.close()
        env = worker_env(
            stack.redis.url,
            stack.llm.base_url,
            PARLEY_WORKER_KEY_PREFIX="lost",
            PARLEY_WORKER_SWEEP_INTERVAL_S="1",
            PARLEY_WORKER_ORPHAN_AFTER_S="5",
        )
        started = time.monotonic()
        with WorkerProcess(env, tmp / "lost-worker.log", name="lost"):
            job = Stack(stack.redis, stack.llm, api).wait(
                alice, job_id, {"completed", "failed"}, timeout_s=120
            )
        return {
            "status": job["status"],
            "ended_after_s": round(time.monotonic() - started, 1),
            "orphan_after_s": 5,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("reports/security/hostile-tenant.jsonl"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    redis = RedisServer(tmp / "redis").start()
    r = redis.client()
    r.config_set("maxmemory", 256 << 20)
    r.config_set("maxmemory-policy", "noeviction")
    r.close()
    rows: list[dict[str, Any]] = []
    try:
        with ScriptedLLM(latency_s=0.02) as llm:
            agreeing_debate(llm)
            settings = ApiSettings(
                redis_url=redis.url,
                keys={k: hash_key(v) for k, v in KEYS.items()},
                daily_token_quotas={"bob": 20_000},
                rate_limit_per_minute=100_000,
                metrics_port=free_port(),
                max_batch_items=10_000,
            )
            with (
                WorkerProcess(worker_env(redis.url, llm.base_url), tmp / "worker.log", concurrency=4),
                ApiServer(settings) as api,
            ):
                stack = Stack(redis, llm, api)
                attacks: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                    (
                        "self-consistency x20, budget 300",
                        lambda: budget_attack(stack, {"protocol": "self_consistency", "samples": 20}, 300),
                    ),
                    (
                        "self-consistency x20, budget 3000",
                        lambda: budget_attack(stack, {"protocol": "self_consistency", "samples": 20}, 3_000),
                    ),
                    (
                        "madke 8 agents, budget 600",
                        lambda: budget_attack(stack, {"agents": 8, "knowledge": "none"}, 600),
                    ),
                    (
                        "madke 8 agents, budget 6000",
                        lambda: budget_attack(stack, {"agents": 8, "knowledge": "none"}, 6_000),
                    ),
                    ("15 concurrent jobs vs a 20,000-token quota", lambda: quota_attack(stack)),
                    ("cancelled debate", lambda: cancel_attack(stack)),
                    ("failed debate", lambda: failed_attack(stack)),
                    ("unauthenticated 32 MiB upload", lambda: unauthenticated_upload(stack)),
                    ("300 wrong keys, then the valid key", lambda: wrong_keys(stack)),
                    ("gateway /metrics on the API port", lambda: metrics_public(stack)),
                    ("one key fills Redis with batches", lambda: storage_attack(stack)),
                    ("queued job whose message was lost", lambda: lost_message(stack, tmp)),
                ]
                for name, attack in attacks:
                    row = {"attack": name, **attack()}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        redis.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()

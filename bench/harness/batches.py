"""One batch of debates through the gateway, from the POST to its last finished debate: how the
throughput studies load the service."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from parley_testing.processes import RedisServer

DONE = ("completed", "failed")


def post_batch(client: httpx.Client, items: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """``POST /v1/batches``; the batch id (anything but 202 stops the study: its load never ran)."""
    resp = client.post("/v1/batches", json={"items": items, "config": config})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["batch_id"])


def batch_results(client: httpx.Client, batch_id: str) -> list[dict[str, Any]]:
    """The batch's result lines, one per item (its status, job id and result)."""
    return [json.loads(line) for line in client.get(f"/v1/batches/{batch_id}/results").text.splitlines()]


def run_batch(
    api_url: str, items: list[dict[str, Any]], config: dict[str, Any], *, poll_s: float
) -> tuple[float, list[dict[str, Any]]]:
    """Post the batch and poll it every ``poll_s`` until it has ended: the epoch time of the POST and
    the result lines (the wall ends at the last ``finished_at``, see ``finished_at``)."""
    with httpx.Client(base_url=api_url, timeout=120) as client:
        t0 = time.time()
        batch_id = post_batch(client, items, config)
        while client.get(f"/v1/batches/{batch_id}").json()["status"] not in DONE:
            time.sleep(poll_s)
        return t0, batch_results(client, batch_id)


def job_times(redis: RedisServer, rows: list[dict[str, Any]], field: str = "finished_at") -> list[float]:
    """Each row's job record ``field`` (epoch seconds; 0 where unset), read from the store: the gateway
    answers a finished batch's poll up to one interval late, the record says when each job ended."""
    client = redis.client()
    try:
        return [float(client.hget(f"parley:job:{row['job_id']}", field) or 0) for row in rows]
    finally:
        client.close()

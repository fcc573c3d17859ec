"""The gateway client over an injected transport: problem+json errors, Retry-After, NDJSON results."""

from __future__ import annotations

import json

import httpx
import pytest

from services.gateway_client import GatewayClient, GatewayError, GatewayNotFound, finished_count

pytestmark = pytest.mark.unit


def problem(status: int, detail: str, **headers: str) -> httpx.Response:
    body = {"type": "about:blank", "title": "error", "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json", **headers})


def client_for(handler: httpx.MockTransport, waits: list[float]) -> GatewayClient:
    async def sleep(s: float) -> None:
        waits.append(s)

    return GatewayClient("http://gw", api_key="k1", transport=handler, max_waits=3, sleep=sleep)


async def test_busy_gateway_is_retried_after_the_time_it_names() -> None:
    calls: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return problem(503, "draining", **{"retry-after": "2"})
        return httpx.Response(202, json={"batch_id": "b1", "status": "queued", "total": 1})

    waits: list[float] = []
    async with client_for(httpx.MockTransport(handle), waits) as client:
        created = await client.submit_batch([{"question": "q?"}], {"protocol": "single"}, "idem-1")
    assert created["batch_id"] == "b1"
    assert waits == [2.0, 2.0]
    assert all(r.headers["authorization"] == "Bearer k1" for r in calls)
    assert calls[-1].headers["idempotency-key"] == "idem-1"
    assert json.loads(calls[-1].content) == {"items": [{"question": "q?"}], "config": {"protocol": "single"}}


async def test_errors_carry_the_problem_and_give_up_after_max_waits() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/gone"):
            return problem(404, "no batch 'gone'")
        return problem(429, "quota exceeded", **{"retry-after": "1"})

    waits: list[float] = []
    async with client_for(httpx.MockTransport(handle), waits) as client:
        with pytest.raises(GatewayNotFound, match="404: no batch 'gone'"):
            await client.get_batch("gone")
        with pytest.raises(GatewayError) as caught:
            await client.get_debate("j1")
    assert caught.value.status == 429 and caught.value.problem["detail"] == "quota exceeded"
    assert waits == [1.0, 1.0, 1.0]


async def test_unreachable_gateway_is_a_gateway_error() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with client_for(httpx.MockTransport(handle), []) as client:
        with pytest.raises(GatewayError, match="cannot reach the Parley API") as caught:
            await client.get_batch("b1")
    assert caught.value.status is None


async def test_results_keep_an_unreadable_line_as_a_failed_entry() -> None:
    body = '{"id": "a", "status": "completed"}\n\n{not json\n{"id": "c", "status": "failed"}\n'

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=body, headers={"content-type": "application/x-ndjson"})

    async with client_for(httpx.MockTransport(handle), []) as client:
        rows = await client.results("b1")
    assert [r["id"] for r in rows] == ["a", None, "c"]
    assert rows[1]["error"] == "unreadable results line 3"


async def test_wait_batch_polls_until_completed_and_times_out() -> None:
    statuses = iter(["queued", "running", "completed"])

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"batch_id": "b1", "status": next(statuses), "counts": {}})

    seen: list[str] = []
    waits: list[float] = []
    async with client_for(httpx.MockTransport(handle), waits) as client:
        done = await client.wait_batch("b1", poll_s=0.5, on_progress=lambda s: seen.append(s["status"]))
    assert done["status"] == "completed" and seen == ["queued", "running", "completed"]
    assert waits == [0.5, 0.5]

    def never(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"batch_id": "b1", "status": "running", "counts": {}})

    async with client_for(httpx.MockTransport(never), []) as client:
        with pytest.raises(TimeoutError):
            await client.wait_batch("b1", timeout_s=0.0)


def test_finished_count_counts_only_terminal_job_statuses() -> None:
    counts = {"queued": 4, "retrieving": 1, "debating": 2, "completed": 3, "failed": 1, "cancelled": 1}
    assert finished_count({"counts": counts}) == 5
    assert finished_count({}) == 0

"""The client over an injected transport: problem+json errors, Retry-After, NDJSON results, SSE."""

from __future__ import annotations

import json

import httpx
import pytest

from parley_client import AsyncParleyClient, BatchView, ParleyError, ParleyNotFound, finished_count

pytestmark = pytest.mark.unit


def problem(status: int, detail: str, **headers: str) -> httpx.Response:
    body = {"type": "about:blank", "title": "error", "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json", **headers})


def batch_view(status: str, counts: dict[str, int] | None = None) -> dict[str, object]:
    return {
        "batch_id": "b1",
        "status": status,
        "total": 1,
        "counts": counts or {},
        "progress": 0.0,
        "created_at": 0.0,
        "config": {},
    }


def client_for(handler: httpx.MockTransport, waits: list[float]) -> AsyncParleyClient:
    async def sleep(s: float) -> None:
        waits.append(s)

    return AsyncParleyClient("http://gw", api_key="k1", transport=handler, max_waits=3, sleep=sleep)


async def test_busy_gateway_is_retried_after_the_time_it_names() -> None:
    calls: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return problem(503, "draining", **{"retry-after": "2"})
        accepted = {"batch_id": "b1", "status": "queued", "total": 1, "location": "/v1/batches/b1"}
        return httpx.Response(202, json=accepted)

    waits: list[float] = []
    async with client_for(httpx.MockTransport(handle), waits) as client:
        created = await client.submit_batch(
            [{"question": "q?"}], {"protocol": "single"}, idempotency_key="idem-1"
        )
    assert created.batch_id == "b1" and created.total == 1
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
        with pytest.raises(ParleyNotFound, match="404: no batch 'gone'"):
            await client.get_batch("gone")
        with pytest.raises(ParleyError) as caught:
            await client.get("j1")
    assert caught.value.status == 429 and caught.value.problem["detail"] == "quota exceeded"
    assert waits == [1.0, 1.0, 1.0]


async def test_unreachable_gateway_is_a_parley_error() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with client_for(httpx.MockTransport(handle), []) as client:
        with pytest.raises(ParleyError, match="cannot reach the Parley API") as caught:
            await client.get_batch("b1")
    assert caught.value.status is None


async def test_results_keep_an_unreadable_line_as_a_failed_entry() -> None:
    body = '{"id": "a", "status": "completed"}\n\n{not json\n{"id": "c", "status": "failed"}\n'

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=body, headers={"content-type": "application/x-ndjson"})

    async with client_for(httpx.MockTransport(handle), []) as client:
        rows = await client.results("b1")
    assert [r.id for r in rows] == ["a", None, "c"]
    assert rows[1].status == "failed" and rows[1].error == "unreadable results line 3"


async def test_wait_batch_polls_until_completed_and_times_out() -> None:
    statuses = iter(["queued", "running", "completed"])

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=batch_view(next(statuses)))

    seen: list[str] = []
    waits: list[float] = []
    async with client_for(httpx.MockTransport(handle), waits) as client:
        done = await client.wait_batch("b1", poll_s=0.5, on_progress=lambda s: seen.append(s.status))
    assert done.status == "completed" and seen == ["queued", "running", "completed"]
    assert waits == [0.5, 0.5]

    def never(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=batch_view("running"))

    async with client_for(httpx.MockTransport(never), []) as client:
        with pytest.raises(TimeoutError):
            await client.wait_batch("b1", timeout_s=0.0)


def test_finished_count_counts_only_terminal_job_statuses() -> None:
    counts = {"queued": 4, "retrieving": 1, "debating": 2, "completed": 3, "failed": 1, "cancelled": 1}
    assert finished_count(BatchView.model_validate({**batch_view("running"), "counts": counts})) == 5
    assert finished_count(BatchView.model_validate(batch_view("queued"))) == 0


async def test_events_are_parsed_until_the_terminal_one_and_resume_with_last_event_id() -> None:
    stream = (
        ": ping\n\n"
        'id: 1-0\nevent: job.queued\ndata: {"job_id": "j1"}\n\n'
        'id: 2-0\nevent: turn.completed\ndata: {"round": 1, "answer": "Paris"}\n\n'
        'id: 3-0\nevent: job.completed\ndata: {"answer": "Paris"}\n\n'
        "id: 4-0\nevent: never.read\ndata: {}\n\n"
    )
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=stream, headers={"content-type": "text/event-stream"})

    async with client_for(httpx.MockTransport(handle), []) as client:
        events = [e async for e in client.events("j1", last_event_id="0-5")]
    assert [(e.id, e.type) for e in events] == [
        ("1-0", "job.queued"),
        ("2-0", "turn.completed"),
        ("3-0", "job.completed"),
    ]
    assert events[1].data == {"round": 1, "answer": "Paris"}
    assert seen[0].url.path == "/v1/debates/j1/events" and seen[0].headers["last-event-id"] == "0-5"


async def test_a_streamed_request_is_retried_after_retry_after_too() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return problem(429, "slow down", **{"retry-after": "7"})
        return httpx.Response(200, text='{"id": "a", "status": "completed"}\n')

    waits: list[float] = []
    async with client_for(httpx.MockTransport(handle), waits) as client:
        rows = await client.results("b1")
    assert [r.id for r in rows] == ["a"] and waits == [7.0] and client.retries == 1

"""The OpenAI-compatible route driven by the official ``openai`` package, on the real stack.

Real redis-server, the real gateway under uvicorn, a real Celery worker answering from the scripted
LLM: a plain completion, a streamed one (reasoning, then content, then usage), debate settings as
``extra_body``, an unknown model, refused conversation turns, a key over its quota, and a client
that disconnects mid-stream (its debate is cancelled).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from api.guards import hash_key
from tests.api.conftest import KEY_A, KEYS, api_settings
from tests.api.support import ApiServer, RedisServer, WorkerProcess, wait_status, worker_env
from tests.support.scripted_llm import ClosedPort, ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY_C = "carol-small-quota-key"
NO_KNOWLEDGE = {"parley": {"knowledge": "none"}}


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    with ClosedPort() as dead_retriever:
        env = worker_env(
            redis_server.url, llm.base_url, dead_retriever.url, PARLEY_RETRIEVER_CLIENT_MAX_ATTEMPTS="1"
        )
        log = tmp_path_factory.mktemp("worker") / "worker.log"
        with WorkerProcess(env, log, concurrency=2) as proc:
            yield proc


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer, worker: WorkerProcess) -> Iterator[ApiServer]:
    settings = api_settings(
        redis_server.url,
        keys={**KEYS, "carol": hash_key(KEY_C)},
        daily_token_quotas={"carol": 1_000},
        sse_block_ms=200,
    )
    with ApiServer(settings) as server:
        yield server


@pytest.fixture
def client(gateway: ApiServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY_A, max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture
def rest(gateway: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as c:
        yield c


def job_of(completion_id: str) -> str:
    assert completion_id.startswith("chatcmpl-job_"), completion_id
    return completion_id.removeprefix("chatcmpl-")


def test_models_are_listed_in_openai_shape(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    for name in ("parley-madke", "parley-self-consistency", "parley-mallm-voting", "parley-mad-ciar"):
        assert name in ids
    assert client.models.retrieve("parley-cot").owned_by == "parley"


def test_plain_completion(client: openai.OpenAI, rest: httpx.Client, scripted: ScriptedLLM) -> None:
    out = client.chat.completions.create(
        model="parley-cot", messages=[{"role": "user", "content": "What is the capital of France?"}]
    )
    assert out.object == "chat.completion"
    assert out.model == "parley-cot"
    assert out.choices[0].message.content == "Paris"
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.prompt_tokens > 0 and out.usage.completion_tokens > 0
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    extra: dict[str, Any] = out.model_extra["parley"]  # type: ignore[index]
    job_id = job_of(out.id)
    assert extra["job_id"] == job_id and extra["protocol"] == "cot"
    assert extra["transcript"].endswith(f"/v1/debates/{job_id}")
    assert extra["viewer"].endswith(f"/ui/#/debate/{job_id}")
    # The same job, through the REST API: one debate, the same answer and usage.
    job = rest.get(f"/v1/debates/{job_id}").json()
    assert job["status"] == "completed" and job["result"]["answer"] == "Paris"
    assert job["result"]["usage"]["prompt_tokens"] == out.usage.prompt_tokens


def test_streamed_completion_reasons_then_answers_then_reports_usage(
    client: openai.OpenAI, scripted: ScriptedLLM
) -> None:
    stream = client.chat.completions.create(
        model="parley-madke",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body=NO_KNOWLEDGE,
    )
    kinds: list[str] = []
    reasoning = content = ""
    usage = None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
            kinds.append("usage")
            assert chunk.choices == []
            continue
        delta = chunk.choices[0].delta
        thought = (delta.model_extra or {}).get("reasoning_content")
        if thought:
            reasoning += thought
            kinds.append("reasoning")
        if delta.content:
            content += delta.content
            kinds.append("content")
    assert content == "Paris"
    # Progress first (each agent's answer, the judge's verdict), then the answer, then usage last.
    assert "Round 1, agent 1 (debater): Paris" in reasoning and "judge: consensus" in reasoning
    first_content = kinds.index("content")
    assert kinds[:first_content] and set(kinds[:first_content]) == {"reasoning"}
    assert kinds[-1] == "usage" and "reasoning" not in kinds[first_content:]
    assert usage is not None and usage.prompt_tokens > 0


def test_extra_body_settings_and_openai_parameters_reach_the_config(
    client: openai.OpenAI, rest: httpx.Client, scripted: ScriptedLLM
) -> None:
    out = client.chat.completions.create(
        model="parley-society",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=64,
        temperature=0.2,
        extra_body={"parley": {"knowledge": "none", "agents": 3, "rounds": 2, "budget_tokens": 50_000}},
    )
    config = rest.get(f"/v1/debates/{job_of(out.id)}").json()["config"]
    assert (config["protocol"], config["agents"], config["rounds"]) == ("society", 3, 2)
    assert (config["max_tokens"], config["temperature"], config["budget_tokens"]) == (64, 0.2, 50_000)
    # Validated exactly like a REST config: the refused field is named.
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(
            model="parley-society",
            messages=[{"role": "user", "content": "q?"}],
            extra_body={"parley": {"agents": 99}},
        )
    assert err.value.status_code == 422 and "parley.agents" in err.value.message
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(
            model="parley-cot",
            messages=[{"role": "user", "content": "q?"}],
            extra_body={"parley": {"budget_tokens": 10**7}},
        )
    assert "above this deployment's limit" in err.value.message


def test_unknown_model_is_404_model_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "q?"}])
    assert err.value.code == "model_not_found"
    assert isinstance(err.value.body, dict) and err.value.body["type"] == "invalid_request_error"


def test_earlier_turns_and_system_prompts_are_refused_not_dropped(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="parley-cot",
            messages=[
                {"role": "user", "content": "Who wrote Hamlet?"},
                {"role": "assistant", "content": "Shakespeare."},
                {"role": "user", "content": "When was he born?"},
            ],
        )
    assert err.value.code == "unsupported_context" and "messages.0" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="parley-cot",
            messages=[{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "q?"}],
        )
    assert err.value.code == "unsupported_context"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="parley-cot", messages=[{"role": "user", "content": "q?"}], n=2)


def test_bad_key_and_key_over_quota_raise_the_sdks_usual_errors(gateway: ApiServer) -> None:
    wrong = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="wrong", max_retries=0)
    with wrong, pytest.raises(openai.AuthenticationError) as auth:
        wrong.models.list()
    assert auth.value.code == "invalid_api_key"
    # The key is checked before the body is read: no key and a broken body is still a 401.
    resp = httpx.post(f"{gateway.url}/v1/chat/completions", content=b"{not json", timeout=30)
    assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"
    assert resp.headers["www-authenticate"].startswith("Bearer")
    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {KEY_A}"},
        timeout=30,
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "malformed_json"
    carol = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY_C, max_retries=0)
    with carol, pytest.raises(openai.RateLimitError) as limited:
        carol.chat.completions.create(model="parley-cot", messages=[{"role": "user", "content": "q?"}])
    assert limited.value.code == "insufficient_quota"
    assert "daily token quota of 1000" in limited.value.message
    assert int(limited.value.response.headers["retry-after"]) >= 1


def test_a_client_that_disconnects_cancels_its_debate(
    client: openai.OpenAI, rest: httpx.Client, scripted: ScriptedLLM
) -> None:
    scripted.latency_s = 1.0  # a debate of several seconds
    stream = client.chat.completions.create(
        model="parley-madke",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        stream=True,
        extra_body=NO_KNOWLEDGE,
    )
    first = next(iter(stream))
    job_id = job_of(first.id)
    stream.close()
    cancelled = wait_status(rest, job_id, {"cancelled", "completed", "failed"}, timeout_s=30)
    assert cancelled["status"] == "cancelled", cancelled
    events = rest.get(f"/v1/debates/{job_id}").json()
    assert events["finished_at"] is not None


def test_a_non_streaming_client_that_goes_away_cancels_too(
    gateway: ApiServer, rest: httpx.Client, scripted: ScriptedLLM
) -> None:
    scripted.latency_s = 1.0
    before = {j["job_id"] for j in rest.get("/v1/debates", params={"limit": 100}).json()["items"]}
    body = {"model": "parley-madke", "messages": [{"role": "user", "content": "q?"}], **NO_KNOWLEDGE}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {KEY_A}"},
            timeout=1.5,
        )
    deadline = time.monotonic() + 30
    while True:
        jobs = rest.get("/v1/debates", params={"limit": 100}).json()["items"]
        new = [j for j in jobs if j["job_id"] not in before]
        if new and new[0]["status"] == "cancelled":
            break
        assert time.monotonic() < deadline, new
        time.sleep(0.2)


@pytest.fixture(scope="module")
def one_stream(redis_server: RedisServer, worker: WorkerProcess) -> Iterator[ApiServer]:
    """A gateway that lets each key hold one event stream (or waiting completion) at a time."""
    settings = api_settings(redis_server.url, max_streams_per_key=1, sse_block_ms=200)
    with ApiServer(settings) as server:
        yield server


def test_a_completion_beyond_the_keys_stream_slots_is_refused_before_queueing(
    one_stream: ApiServer, rest: httpx.Client, scripted: ScriptedLLM
) -> None:
    scripted.latency_s = 1.0
    client = openai.OpenAI(base_url=f"{one_stream.url}/v1", api_key=KEY_A, max_retries=0, timeout=60)
    with client:
        stream = client.chat.completions.create(
            model="parley-madke",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            stream=True,
            extra_body=NO_KNOWLEDGE,
        )
        job_id = job_of(next(iter(stream)).id)
        before = [j["job_id"] for j in rest.get("/v1/debates", params={"limit": 100}).json()["items"]]
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="parley-cot", messages=[{"role": "user", "content": "q?"}])
        assert refused.value.code == "too_many_streams"
        after = [j["job_id"] for j in rest.get("/v1/debates", params={"limit": 100}).json()["items"]]
        assert after == before
        stream.close()
    assert (
        wait_status(rest, job_id, {"cancelled", "completed", "failed"}, timeout_s=30)["status"] == "cancelled"
    )

"""No key leaves the place it belongs: a whole run is grepped for the test's secrets.

A real redis-server, the API over HTTP, a real Celery worker process and two scripted LLM endpoints
(the default and a named one, each with its own key). After a completed debate, a failed one and a
refused authentication, everything the run wrote or answered — worker log, API log records, every
Redis key and value, results, event streams, errors, ``/healthz``, the OpenAPI document, ``/v1/usage``
— must not contain any key. The positive control: each endpoint did receive its own key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from retriever.settings import RetrieverSettings
from tests.api.conftest import KEY_A, KEYS, api_settings
from tests.api.support import (
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_agreeing,
    stored_hash,
    wait_status,
    worker_env,
)
from tests.api.test_flow import read_sse
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GLOBAL_KEY = "sk-global-7f3a9c1e-SECRET"
BIG_KEY = "sk-big-5b2d8e4f-SECRET"
SEARCH_KEY = "serper-4c9e1a7b-SECRET"
SECRETS = (GLOBAL_KEY, BIG_KEY, SEARCH_KEY, KEY_A)


def redis_dump(redis_server: RedisServer) -> str:
    r = redis_server.client()
    out: list[str] = []
    try:
        for key in r.scan_iter("*"):
            kind = r.type(key)
            out.append(key)
            if kind == "string" and ":authfail:" in key:
                # A HyperLogLog of sha256 prefixes of wrong credentials (binary, not reversible).
                assert int(r.pfcount(key)) >= 0
            elif kind == "string":
                out.append(str(r.get(key)))
            elif kind == "hash":
                out.append(json.dumps(stored_hash(r, key)))  # results and events of finished jobs
            elif kind == "list":
                out.extend(r.lrange(key, 0, -1))
            elif kind == "set":
                out.extend(r.smembers(key))
            elif kind == "zset":
                out.extend(r.zrange(key, 0, -1))
            elif kind == "stream":
                out.extend(json.dumps(fields) for _, fields in r.xrange(key))
    finally:
        r.close()
    return "\n".join(out)


@pytest.fixture(scope="module")
def endpoints() -> Iterator[tuple[ScriptedLLM, ScriptedLLM]]:
    # The big endpoint serves "big-model": the worker checks at start that each configured model is served.
    with ScriptedLLM() as default, ScriptedLLM(model="big-model") as big:
        script_agreeing(default)
        script_agreeing(big)
        yield default, big


def test_no_secret_in_anything_a_run_writes(
    redis_server: RedisServer,
    endpoints: tuple[ScriptedLLM, ScriptedLLM],
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    default, big = endpoints
    caplog.set_level(logging.DEBUG)
    env = worker_env(
        redis_server.url,
        default.base_url,
        PARLEY_LLM_API_KEY=GLOBAL_KEY,
        PARLEY_LLM_ENDPOINTS=json.dumps(
            {"big": {"base_url": big.base_url, "model": "big-model", "api_key": BIG_KEY}}
        ),
        PARLEY_RETRIEVER_SERPER_API_KEY=SEARCH_KEY,
        PARLEY_LLM_MAX_ATTEMPTS="1",
    )
    log = tmp_path / "worker.log"
    seen: list[str] = []
    settings = api_settings(redis_server.url, keys=KEYS, llm_endpoints=["big"])
    with ApiServer(settings) as api, WorkerProcess(env, log) as _worker:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        with httpx.Client(base_url=api.url, headers=headers, timeout=30) as alice:
            team = [{"endpoint": "big"}, {}]
            ok = alice.post(
                "/v1/debates",
                json={"question": "Capital of France?", "config": {"knowledge": "none", "team": team}},
            )
            assert ok.status_code == 202, ok.text
            done = wait_status(alice, ok.json()["job_id"], {"completed", "failed"})
            assert done["status"] == "completed", done
            default.fail_next(401, count=20)
            bad = alice.post(
                "/v1/debates", json={"question": "Capital of Italy?", "config": {"knowledge": "none"}}
            )
            failed = wait_status(alice, bad.json()["job_id"], {"completed", "failed"})
            assert failed["status"] == "failed"
            assert "LLMBadRequest" in failed["error"]
            # The server's reply body is never read back to the client (a client URL could point
            # at an internal service): the status only.
            assert "scripted failure" not in failed["error"] and "HTTP 401" in failed["error"]
            assert f":{default.port}" not in failed["error"] and "127.0.0.1" not in failed["error"]
            seen += [json.dumps(done), json.dumps(failed)]
            for job in (done, failed):
                seen.append(json.dumps(read_sse(alice, f"/v1/debates/{job['job_id']}/events")))
            seen.append(alice.get("/v1/usage").text)
            seen.append(alice.get("/healthz").text)
            seen.append(alice.get("/openapi.json").text)
        wrong = httpx.get(f"{api.url}/v1/usage", headers={"Authorization": f"Bearer {GLOBAL_KEY}"})
        assert wrong.status_code == 401
        seen.append(wrong.text)
        seen.append(redis_dump(redis_server))
    seen.append(log.read_text(errors="replace"))
    seen.append("\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records))
    settings_text = RetrieverSettings(serper_api_key=SEARCH_KEY)
    seen += [repr(settings_text), str(settings_text), settings_text.model_dump_json()]
    everything = "\n".join(seen)
    for secret in SECRETS:
        assert secret not in everything, f"{secret[:8]}… leaked"
    # The positive control: each endpoint received exactly its own key.
    assert set(big.authorizations) == {f"Bearer {BIG_KEY}"}
    assert set(default.authorizations) == {f"Bearer {GLOBAL_KEY}"}
    assert len(big.requests) == 1  # agent 0 of the first debate (knowledge none: no selection)

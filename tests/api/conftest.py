from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.guards import hash_key
from api.settings import ApiSettings
from tests.api.support import ApiServer, RedisServer, script_agreeing
from tests.support.scripted_llm import ScriptedLLM

KEY_A = "alice-secret-key"
KEY_B = "bob-secret-key"
KEYS = {"alice": hash_key(KEY_A), "bob": hash_key(KEY_B)}


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(latency_s=0.02) as server:
        script_agreeing(server)
        yield server


@pytest.fixture
def scripted(llm: ScriptedLLM) -> Iterator[ScriptedLLM]:
    """The module's scripted LLM, re-scripted to agree and fast for each test."""
    llm.reset()
    llm.latency_s = 0.02
    script_agreeing(llm)
    yield llm
    llm.reset()
    llm.latency_s = 0.02
    script_agreeing(llm)


def api_settings(redis_url: str, **overrides: object) -> ApiSettings:
    values: dict[str, object] = {"redis_url": redis_url, "keys": KEYS, "retry_after_s": 2}
    values.update(overrides)
    return ApiSettings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def api(redis_server: RedisServer) -> Iterator[ApiServer]:
    with ApiServer(api_settings(redis_server.url, max_batch_items=100, max_line_bytes=2048)) as server:
        yield server


@pytest.fixture
def alice(api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as c:
        yield c


@pytest.fixture
def bob(api: ApiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30) as c:
        yield c


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    return tmp_path

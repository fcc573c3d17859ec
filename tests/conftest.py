"""Shared fixtures: a scripted OpenAI-compatible server per test and a client pointed at it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.support import RedisServer, running_redis
from tests.support.scripted_llm import ScriptedLLM

# Model weights and data must come from installed packages, never a hub download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def scripted() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server per test module (the one definition; modules that need it just ask)."""
    yield from running_redis(tmp_path_factory.mktemp("redis"))


# ``make test-unit`` runs the tests marked ``unit`` and promises they start no process: a unit test
# that spawns one (redis-server, a worker, a CLI run as a subprocess) fails here and must be marked
# ``integration`` instead. In-process servers on a thread (the scripted LLM) are allowed.
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec", "os.system"})
_unit_test_running = False


def _refuse_processes_in_unit_tests(event: str, args: tuple[Any, ...]) -> None:
    if _unit_test_running and event in _PROCESS_EVENTS:
        raise RuntimeError(f"a unit test started a process ({event}: {str(args)[:200]}); mark it integration")


sys.addaudithook(_refuse_processes_in_unit_tests)


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_font_list() -> None:
    """matplotlib lists the machine's fonts with ``fc-list`` (a process) the first time it is
    imported on a machine, then reads its cache. Built here, before any test, a fresh machine's first
    unit test that draws a plot is not charged with matplotlib's one-time process."""
    with contextlib.suppress(ImportError):  # matplotlib is only needed by the tests that draw
        import matplotlib.font_manager  # noqa: F401


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    global _unit_test_running
    node = request.node
    _unit_test_running = node.get_closest_marker("unit") is not None and not any(
        node.get_closest_marker(m) for m in ("integration", "llm")
    )
    try:
        yield
    finally:
        _unit_test_running = False


@pytest.fixture(autouse=True)
def _a_call_cache_of_its_own(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test evaluates with its own empty call cache: scripted servers answer the same prompts
    differently from test to test, and a shared cache would replay another test's replies."""
    monkeypatch.setenv("PARLEY_EVAL_CACHE_PATH", str(tmp_path_factory.mktemp("call-cache") / "calls.sqlite"))

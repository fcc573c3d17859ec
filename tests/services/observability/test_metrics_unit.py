"""Pieces of the observability code on their own: log lines and their job context, the queue-depth
collector on a real redis-server, settings, and the outcome labels."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest
import redis

from services.observability.logging_setup import JsonFormatter, job_log_context, make_handler
from services.observability.metrics import (
    QUEUE_DEPTH_NAME,
    QueueDepthCollector,
    exported_names,
    job_outcome,
    worker_metrics_dir,
)
from services.observability.settings import ObservabilitySettings
from tests.api.support import RedisServer

pytestmark = pytest.mark.unit


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = make_handler("json", service="test", stream=stream)
    logger = logging.getLogger("parley.test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_job_of_their_own_asyncio_task(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured

    async def job(job_id: str, batch_id: str | None) -> None:
        with job_log_context(job_id, batch_id):
            logger.info("start %s", job_id)
            await asyncio.sleep(0.01)  # the other job logs in between
            logger.info("end %s", job_id)

    async def both() -> None:
        await asyncio.gather(job("job_a", "bat_1"), job("job_b", None))

    logger.info("before any job")
    asyncio.run(both())
    lines = _lines(stream)
    assert lines[0]["message"] == "before any job" and "job_id" not in lines[0]
    for line in lines[1:]:
        job_id = str(line["message"]).split()[-1]
        assert line["job_id"] == job_id
        assert line["batch_id"] == ("bat_1" if job_id == "job_a" else None)
        assert line["service"] == "test" and line["level"] == "INFO" and line["logger"] == "parley.test.logs"
    assert len(lines) == 5


def test_json_formatter_keeps_tracebacks_inside_the_one_line(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        logger.exception("failed")
    [line] = _lines(stream)
    assert "RuntimeError: boom" in str(line["exc_info"])
    assert JsonFormatter().format(logging.makeLogRecord({"msg": "x"})).count("\n") == 0


@pytest.mark.slow
def test_queue_depth_sums_priority_lists_and_survives_a_dead_broker(redis_server: RedisServer) -> None:
    client = redis.Redis(port=redis_server.port)
    client.delete("q.one", "q.one\x06\x163", "q.two")
    client.rpush("q.one", "m1", "m2", "m3")
    client.rpush("q.one\x06\x163", "m4")  # kombu's list for priority 3
    [family] = list(QueueDepthCollector(client, ["q.one", "q.two"]).collect())
    assert family.name == QUEUE_DEPTH_NAME
    assert {s.labels["queue"]: s.value for s in family.samples} == {"q.one": 4.0, "q.two": 0.0}
    client.close()

    dead = redis.Redis(port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    assert list(QueueDepthCollector(dead, ["q.one"]).collect()) == []


def test_job_outcomes_collapse_skips() -> None:
    assert [
        job_outcome(s) for s in ("completed", "failed", "skipped:cancelled", "skipped:leased", "missing")
    ] == [
        "completed",
        "failed",
        "cancelled",
        "skipped",
        "skipped",
    ]


def test_exported_names_have_the_exposition_suffixes() -> None:
    names = exported_names()
    assert {"parley_jobs_total", "parley_job_duration_seconds_bucket", "parley_queue_depth"} <= names
    assert {"parley_llm_tokens_total", "parley_refusals_total", "parley_retrieval_seconds_count"} <= names
    assert "parley_jobs" not in names


def test_observability_settings_read_the_standard_otel_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("PARLEY_LOG_FORMAT", "json")
    settings = ObservabilitySettings()
    assert settings.otlp_endpoint == "http://collector:4318"
    assert settings.log_format == "json" and settings.trace_prompts is False
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert ObservabilitySettings().otlp_endpoint is None


@pytest.mark.integration  # runs a short-lived python process (a worker that is gone)
def test_worker_metrics_dir_is_per_process_and_drops_dead_workers_folders() -> None:
    import os
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    parent = worker_metrics_dir().parent
    stale = parent / str(dead_pid)
    stale.mkdir(parents=True, exist_ok=True)
    live = parent / str(os.getpid())  # this process: alive, kept
    live.mkdir(parents=True, exist_ok=True)
    try:
        assert worker_metrics_dir().name == str(os.getpid())
        assert not stale.exists() and live.exists()
    finally:
        live.rmdir()

"""Log formatting for every process: text for people (the default) or one JSON object per line.

``PARLEY_LOG_FORMAT=json`` makes each line a JSON object with the time, level, logger and message; a
line written while a job runs also carries ``job_id`` and ``batch_id``, whichever logger wrote it
(the job context lives in a ``contextvars`` variable, so concurrent asyncio tasks keep theirs apart).
Nothing here adds configuration values or request bodies to a line, so secrets stay out.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(job_tag)s: %(message)s"
# Loggers that servers configure with their own handlers; ours must see their records instead.
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task")


@dataclass
class JobLogContext:
    job_id: str
    batch_id: str | None = None


_current_job: contextvars.ContextVar[JobLogContext | None] = contextvars.ContextVar(
    "parley_log_job", default=None
)


def current_job_id() -> str | None:
    """The job whose work is running in this task (None outside a job): the LLM client keys one
    debate's calls to one server replica by it."""
    job = _current_job.get()
    return job.job_id if job is not None else None


@contextmanager
def job_log_context(job_id: str, batch_id: str | None = None) -> Iterator[None]:
    """Every line logged inside (in this task and the tasks it starts) names the job and its batch."""
    outer = _current_job.get()
    if outer is not None and outer.job_id == job_id and outer.batch_id is None:
        # The Celery task's context (see bind_celery_task_logs) learns the batch for its last lines.
        outer.batch_id = batch_id
    token = _current_job.set(JobLogContext(job_id, batch_id))
    try:
        yield
    finally:
        _current_job.reset(token)


def bind_celery_task_logs() -> None:
    """Celery's own lines about a task (its result, its errors) carry the job id too: the task's only
    argument is the job id, set as the log context from ``task_prerun`` to ``task_postrun``."""
    # lazy: every process configures logging here; only the worker may load Celery
    from celery.signals import task_postrun, task_prerun

    tokens: dict[str, contextvars.Token[JobLogContext | None]] = {}

    def prerun(task_id: str | None = None, args: Any = None, **_: Any) -> None:
        if task_id and args:
            tokens[task_id] = _current_job.set(JobLogContext(str(args[0])))

    def postrun(task_id: str | None = None, **_: Any) -> None:
        token = tokens.pop(task_id or "", None)
        if token is not None:
            _current_job.reset(token)

    task_prerun.connect(prerun, weak=False, dispatch_uid="parley-log-prerun")
    task_postrun.connect(postrun, weak=False, dispatch_uid="parley-log-postrun")


class JobContextFilter(logging.Filter):
    """Copies the current job's ids onto each record (``job_id``, ``batch_id``, ``job_tag``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = _current_job.get()
        # An explicit ``extra={"job_id": ...}`` wins over the context.
        job_id = getattr(record, "job_id", None) or (job.job_id if job else None)
        batch_id = getattr(record, "batch_id", None) or (job.batch_id if job else None)
        record.job_id = job_id
        record.batch_id = batch_id
        record.job_tag = f" [job {job_id}]" if job_id else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, job ids, ``service``."""

    def __init__(self, service: str | None = None) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._service:
            entry["service"] = self._service
        job_id = getattr(record, "job_id", None)
        if job_id is not None:
            entry["job_id"] = job_id
            entry["batch_id"] = getattr(record, "batch_id", None)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def make_handler(fmt: LogFormat, service: str | None = None, stream: object = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.addFilter(JobContextFilter())
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(fmt: LogFormat, level: str | int = "INFO", *, service: str | None = None) -> None:
    """Route every logger through one root handler in ``fmt``; call once at process start (again is
    harmless: the handler is replaced, never duplicated)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(make_handler(fmt, service))
    root.setLevel(level if isinstance(level, int) else level.upper())
    for name in SERVER_LOGGERS:
        server_logger = logging.getLogger(name)
        server_logger.handlers.clear()
        server_logger.propagate = True
    # httpx logs every LLM call at INFO; a debate makes dozens.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Python warnings become records too, so stderr carries nothing but formatted lines.
    logging.captureWarnings(True)

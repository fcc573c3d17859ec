"""Handing job ids to the workers: the ``Enqueuer`` protocol and its Celery implementation.

Only the job id travels in the message; everything else is in the job store, so a message is tiny
and a redelivered message always sees the job's current state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from anyio import to_thread
from celery import Celery

from services.task_queue import TASK_RUN_DEBATE


class Enqueuer(Protocol):
    async def enqueue(self, job_ids: Sequence[str], queue: str) -> None: ...

    def close(self) -> None: ...


class CeleryEnqueuer:
    """Publishes ``parley.run_debate(job_id)`` messages; sends run in a thread (kombu is blocking)."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def _send_all(self, job_ids: Sequence[str], queue: str) -> None:
        # One producer (one connection) for the whole batch: ~10x faster than a connection per send.
        with self._app.producer_or_acquire() as producer:
            for job_id in job_ids:
                self._app.send_task(
                    TASK_RUN_DEBATE, args=[job_id], queue=queue, producer=producer, ignore_result=True
                )

    async def enqueue(self, job_ids: Sequence[str], queue: str) -> None:
        await to_thread.run_sync(self._send_all, list(job_ids), queue)

    def close(self) -> None:
        self._app.close()

"""``parley worker`` with one injected fault: the consumer's first start raises an error Celery does
not recover from (the kind kombu's reconnect race raises after the broker vanished), so Celery's
worker stops with "Unrecoverable error". Run as ``python -m tests.api.fail_once_worker worker …``;
``PARLEY_TEST_FAULT_MARKER`` names a file that records the fault was raised, so it happens once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery, bootsteps

from debate_worker import celery_app, worker_cli


class FailOnce(bootsteps.StartStopStep):
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, parent: Any) -> None:
        marker = Path(os.environ["PARLEY_TEST_FAULT_MARKER"])
        if not marker.exists():
            marker.write_text("raised\n")
            raise AttributeError("'NoneType' object has no attribute 'hostname'")


def with_fault(create: Any) -> Any:
    def create_worker_app(*args: Any, **kwargs: Any) -> Celery:
        app: Celery = create(*args, **kwargs)
        app.steps["consumer"].add(FailOnce)
        return app

    return create_worker_app


if __name__ == "__main__":
    celery_app.create_worker_app = with_fault(celery_app.create_worker_app)
    worker_cli.app()

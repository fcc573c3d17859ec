"""The message contract between the gateway and the workers: queue names, the task name, the Celery
settings both sides share, and the gateway's send-only Celery app.

It lives in ``services`` (what several processes share) so that the gateway publishes debate jobs
without importing the worker package: ``api`` imports this module, ``debate_worker.celery_app``
builds the consuming app on the same ``COMMON_CONF``. Celery settings never come from ``os.environ``
here, only from the arguments passed in.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu import Exchange, Queue

from services.redis_connect import RedisSpec

QUEUE_INTERACTIVE = "parley.interactive"
QUEUE_BATCH = "parley.batch"
TASK_RUN_DEBATE = "parley.run_debate"


def queue(name: str) -> Queue:
    """A queue with its own direct exchange and routing key, so a message lands in exactly one queue."""
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


COMMON_CONF: dict[str, Any] = {
    "task_serializer": "json",
    "accept_content": ["json"],
    # Results live in Parley's job store; Celery's backend would answer PENDING for unknown ids.
    "task_ignore_result": True,
    "task_default_queue": QUEUE_INTERACTIVE,
    "task_queues": (queue(QUEUE_INTERACTIVE), queue(QUEUE_BATCH)),
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
    "worker_send_task_events": False,
    "enable_utc": True,
}


def create_publisher(broker: str | RedisSpec, *, connection_timeout_s: float = 3.0) -> Celery:
    """A Celery app that only sends ``parley.run_debate`` messages (the API's side of the queue).
    ``broker`` is a URL or a ``RedisSpec`` (TLS files, Sentinel master: ``celery_broker_conf``)."""
    spec = broker if isinstance(broker, RedisSpec) else RedisSpec("broker_url", broker)
    conf = spec.celery_broker_conf()
    conf["broker_transport_options"]["socket_connect_timeout"] = connection_timeout_s
    app = Celery("parley-api", set_as_current=False)
    app.conf.update(
        COMMON_CONF,
        broker_connection_timeout=connection_timeout_s,
        # Fail fast when Redis is down: the API answers 503 with Retry-After instead of hanging.
        task_publish_retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
        **conf,
    )
    return app

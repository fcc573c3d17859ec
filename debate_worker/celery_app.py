"""The Celery application: one task per debate, on two queues.

Delivery guarantees (all from ``WorkerSettings``): ``task_acks_late`` so a message is removed only
after the debate finished; ``task_reject_on_worker_lost`` so a killed worker process puts it back;
``worker_prefetch_multiplier=1`` so an idle process never sits on messages another could run; soft and
hard time limits below Redis's visibility timeout so a healthy run is never handed out twice. Parley's
own attempt counter (in the job store) caps redeliveries of a job that keeps killing its worker.

Fairness: single debates go to ``parley.interactive``, batch items to ``parley.batch``. A worker
consumes both, and kombu's Redis transport rotates the queue order after every message it takes, so
a 10,000-item batch delays a single request by at most one debate per worker process.

The API uses ``services.task_queue.create_publisher`` (the same message format, no task code);
workers use ``create_worker_app``. Celery settings never come from ``os.environ`` here, only from the settings
objects passed in.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import redis
from celery import Celery, signals

from debate_worker.runtime import WorkerRuntime
from debate_worker.sweeper import start_sweeping
from debate_worker.tasks import register_tasks
from debate_worker.worker_settings import WorkerSettings
from services.jobstore import draining_key
from services.llm import REPLICA_HEALTH, RedisReplicaLoad
from services.redis_connect import sync_client
from services.task_queue import COMMON_CONF, QUEUE_INTERACTIVE, TASK_RUN_DEBATE, queue

if TYPE_CHECKING:
    from services.llm import ReplicaRegistry


def create_worker_app(settings: WorkerSettings, runtime: WorkerRuntime | None = None) -> Celery:
    """The worker's Celery app with the debate task registered against ``runtime``."""
    app = Celery("parley-worker", set_as_current=True)
    conf = dict(COMMON_CONF)
    conf.update(settings.celery_conf())
    conf["task_queues"] = tuple(queue(q) for q in settings.queues)
    app.conf.update(conf)
    # httpx logs every LLM call at INFO; a debate makes dozens.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    runtime = runtime or WorkerRuntime.from_env(settings)
    register_tasks(app, runtime)
    install_lifecycle(app, settings, runtime.retention.job_ttl_s)
    install_replica_load(settings)
    return app


def share_replica_load(
    settings: WorkerSettings, registry: ReplicaRegistry | None = None
) -> RedisReplicaLoad | None:
    """Make this process's replica choices see every worker process's LLM calls in flight, shared
    through Redis (``services.llm.replica_load``); with ``replica_load_ttl_s`` 0 each process counts its
    own calls only. Returns the sharing (``RedisReplicaLoad``), or None."""
    target = registry or REPLICA_HEALTH
    if settings.replica_load_ttl_s <= 0:
        target.share(None)
        return None
    shared = RedisReplicaLoad(
        settings.redis_spec(),
        key=f"{settings.key_prefix}:replica-load",
        ttl_s=settings.replica_load_ttl_s,
        refresh_s=settings.replica_load_refresh_s,
    )
    target.share(shared)
    return shared


def install_replica_load(settings: WorkerSettings) -> None:
    """``share_replica_load`` when the worker starts, in its main process: each pool process starts
    its own sync thread on its first call (after the fork)."""
    current: list[RedisReplicaLoad] = []

    def on_init(**_: Any) -> None:
        for previous in current:  # an in-place restart: one sharing, not one per start
            previous.close()
        current.clear()
        shared = share_replica_load(settings)
        if shared is not None:
            current.append(shared)

    signals.worker_init.connect(on_init, weak=False)


def install_lifecycle(app: Celery, settings: WorkerSettings, ttl_s: int) -> None:
    """What the worker's main process does around its pool: the sweep of jobs whose worker vanished
    (from ``worker_ready``), and on shutdown (SIGTERM, ``docker compose restart``) a flag that makes
    this node's running jobs hand themselves back to the queue at once, resuming from their last
    checkpoint elsewhere instead of waiting out the stop grace period and the visibility timeout."""
    stoppers: list[Any] = []

    def publish(job_id: str, queue_name: str) -> None:
        app.send_task(TASK_RUN_DEBATE, args=[job_id], queue=queue_name or QUEUE_INTERACTIVE)

    def on_ready(sender: Any = None, **_: Any) -> None:
        # A node restarted under the same name must not inherit its previous life's drain flag.
        node = getattr(sender, "hostname", None)
        if node:
            client = sync_client(settings.redis_spec(), socket_timeout=3, socket_connect_timeout=3)
            try:
                client.delete(draining_key(settings.key_prefix, node))
            except redis.RedisError:
                logging.getLogger("parley.worker").exception("could not clear the drain flag of %s", node)
            finally:
                client.close()
        # Ready again after an in-place restart (celery_restarts): one sweeper, not one per start.
        for stop in stoppers:
            stop.set()
        stoppers.clear()
        stoppers.append(start_sweeping(settings, ttl_s, publish))

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        for stop in stoppers:
            stop.set()
        node = str(sender) if sender else ""
        if not node:
            return
        client = sync_client(settings.redis_spec(), socket_timeout=3, socket_connect_timeout=3)
        try:
            client.set(draining_key(settings.key_prefix, node), "1", ex=900)
        except redis.RedisError:
            logging.getLogger("parley.worker").exception("could not flag %s as draining", node)
        finally:
            client.close()

    signals.worker_ready.connect(on_ready, weak=False, sender=None)
    signals.worker_shutting_down.connect(on_shutdown, weak=False)


def __getattr__(name: str) -> Any:
    # ``celery -A debate_worker.celery_app worker`` looks up ``app``; build it only when asked so that
    # importing this module (the API does) never reads the worker's settings.
    if name == "app":
        return create_worker_app(WorkerSettings())
    raise AttributeError(name)

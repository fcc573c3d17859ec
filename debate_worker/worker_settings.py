"""Settings of the worker process (``PARLEY_WORKER_*``), read once at start-up.

The Celery settings carry exactly Celery's names (``task_acks_late``, ``worker_prefetch_multiplier``,
…) so ``celery_conf()`` can hand them to ``app.conf.update`` unchanged and the Celery documentation
applies to them word for word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from engine.config import SEARCH_QUERY_MODES, SearchQueryMode
from services.egress import NetworkList
from services.redis_settings import RedisSettingsMixin, redis_url_field, wait_replicas_field
from services.settings import MetricsPort, ParleySettings, Seconds, SecondsOrZero
from services.task_queue import QUEUE_BATCH, QUEUE_INTERACTIVE


class WorkerSettings(ParleySettings, RedisSettingsMixin):
    """Job store, broker, Celery delivery guarantees and Parley's retry caps for the worker."""

    model_config = SettingsConfigDict(
        env_prefix="PARLEY_WORKER_", frozen=True, extra="ignore", env_nested_delimiter="__"
    )

    redis_url: str = redis_url_field("job store (Parley's own)")
    redis_wait_replicas: int = wait_replicas_field(
        "after a job's end, wait until this many replicas hold it (Redis WAIT; fewer in time is logged)"
    )
    queues: list[str] = Field(default_factory=lambda: [QUEUE_INTERACTIVE, QUEUE_BATCH])
    call_cache: bool = Field(
        default=False,
        description="replay LLM calls the workers made before for the same API key (same model, "
        "messages, sampling, caller and sample) from the job store's Redis instead of calling the model; "
        "a replayed call costs no budget. Off: every call reaches the model (fresh samples for repeated "
        "questions)",
    )
    call_cache_max_entries: int = Field(
        default=200_000, ge=100, description="cached replies kept (least recently used evicted past it)"
    )
    call_cache_ttl_s: int = Field(default=7 * 86_400, ge=60, description="how long a cached reply is kept")

    # Parley's own redelivery cap: a job whose worker dies this many times fails instead of looping.
    max_attempts: int = Field(default=3, ge=1, le=20)
    # Only the lease holder runs a job; the lease is renewed every lease_ttl_s/3 while it runs.
    lease_ttl_s: float = Field(default=15.0, gt=0.5)
    # Retriever calls: the client retries ``PARLEY_RETRIEVER_CLIENT_MAX_ATTEMPTS`` times itself;
    # this adds no second retry layer, only the time budget for building one pool.
    pool_timeout_s: Seconds = Field(
        default=400.0, description="time to build one pool; above the retriever's retry window"
    )
    # Jobs whose worker vanished (hard time limit, OOM kill, lost host) without handing them back:
    # one worker at a time checks every sweep_interval_s and requeues them (or fails them after
    # max_attempts); 0 turns the sweep off.
    sweep_interval_s: SecondsOrZero = 15.0
    orphan_after_s: Seconds = Field(
        default=40.0,
        description="a job queued this long is looked for in the broker (read at most every half of "
        "this); absent on two reads in a row, it is published again (or failed after max_attempts)",
    )
    orphan_scan_rate: float = Field(
        default=2000.0,
        gt=0,
        description="messages per second the orphan check may read from the broker on average: a "
        "long queue is read less often than every orphan_after_s / 2",
    )
    charge_retry_s: SecondsOrZero = Field(
        default=30.0,
        description="how long an LLM call's charge is retried while the store is unreachable (a Redis "
        "restart) before the attempt stops",
    )
    store_retry_delay_s: SecondsOrZero = Field(
        default=5.0, description="pause before requeueing a job the store refused to update"
    )
    client_url_networks: NetworkList = Field(
        default_factory=list,
        description="non-public networks (CIDR) an agent's client-given base_url may reach, checked on "
        "the address dialled; list the same as PARLEY_API_CLIENT_URL_NETWORKS",
    )

    search_query_modes: list[SearchQueryMode] = Field(
        default_factory=lambda: list(SEARCH_QUERY_MODES),
        description="the search_query modes this worker runs (JSON list); a job asking for another fails "
        "with the reason. passage has the model write a search passage before retrieval (one more call, "
        "charged to the job); list the same as PARLEY_API_SEARCH_QUERY_MODES",
    )
    # Prometheus: the main process serves /metrics for all its pool processes, which write their
    # values to files in metrics_dir (emptied at start); 0 turns the endpoint off.
    metrics_port: MetricsPort = Field(default=9101, description="worker /metrics port; 0 = none")
    metrics_host: str = Field(
        default="127.0.0.1",
        description="bind address of the worker's /metrics (loopback: metrics name keys; set 0.0.0.0 "
        "only on a network only Prometheus reaches)",
    )
    metrics_dir: Path | None = Field(
        default=None,
        description="this worker's folder of metric files, emptied at start; unset = a folder per "
        "worker process under <tmp>/parley-worker-metrics",
    )

    # LLM replicas (an endpoint that lists several base URLs): the worker processes share their calls
    # in flight per replica through redis_url, so each chooses by the load of all of them.
    replica_load_ttl_s: SecondsOrZero = Field(
        default=3.0,
        description="LLM replicas: how long a process's shared calls-in-flight counts outlive its last "
        "sync (a dead process's lapse after this); 0 = not shared, each process counts its own calls",
    )
    replica_load_refresh_s: Seconds = Field(
        default=0.1,
        description="LLM replicas: how often an active process re-reads the others' calls in flight "
        "(it also syncs at once when its own counts change)",
    )

    # Celery's worker stops for good on an error it cannot recover from (a reconnect race after the
    # broker vanished, celery/kombu#582): its main process is then started again in place, at most
    # this many times within restart_window_s; 0 leaves it stopped (a supervisor must restart it).
    restart_on_failure: int = Field(
        default=5, ge=0, le=100, description="in-place restarts after an unrecoverable Celery error"
    )
    restart_window_s: Seconds = Field(
        default=600.0, description="the window restart_on_failure counts restarts in"
    )
    restart_delay_s: SecondsOrZero = Field(default=2.0, description="pause before such a restart")

    # --- Celery, by Celery's names -------------------------------------------------------------
    task_acks_late: bool = True
    task_reject_on_worker_lost: bool = True
    worker_prefetch_multiplier: int = Field(default=1, ge=1)
    task_soft_time_limit: Seconds = 1500.0
    task_time_limit: Seconds = 1800.0
    visibility_timeout: Seconds = Field(
        default=3600.0, description="broker_transport_options.visibility_timeout (Redis)"
    )
    # How often a worker sweeps Redis for messages of dead workers whose visibility timeout expired:
    # every interval x throttle seconds (kombu's defaults: 10 x 10). Lower both with a low timeout.
    unacked_restore_interval: int = Field(default=10, ge=1)
    unacked_restore_throttle: int = Field(default=10, ge=1)
    worker_concurrency: int | None = Field(default=None, ge=1, description="None = number of CPUs")
    worker_pool: Literal["prefork", "threads", "solo"] = "prefork"
    worker_max_tasks_per_child: int | None = Field(default=200, ge=1)
    broker_connection_timeout: Seconds = 4.0

    @model_validator(mode="after")
    def _limits_below_visibility(self) -> WorkerSettings:
        # A task still running when the visibility timeout expires is handed to a second worker;
        # keeping both limits below it means a healthy run is never duplicated.
        if not self.task_soft_time_limit < self.task_time_limit < self.visibility_timeout:
            raise ValueError(
                "need task_soft_time_limit < task_time_limit < visibility_timeout, got "
                f"{self.task_soft_time_limit} / {self.task_time_limit} / {self.visibility_timeout}"
            )
        return self

    def celery_conf(self) -> dict[str, Any]:
        """The ``app.conf.update`` mapping, keys exactly as Celery names them."""
        broker = self.broker_spec().celery_broker_conf()
        conf: dict[str, Any] = {
            **broker,
            "task_acks_late": self.task_acks_late,
            "task_reject_on_worker_lost": self.task_reject_on_worker_lost,
            "worker_prefetch_multiplier": self.worker_prefetch_multiplier,
            "task_soft_time_limit": self.task_soft_time_limit,
            "task_time_limit": self.task_time_limit,
            "broker_transport_options": {
                **broker["broker_transport_options"],
                "visibility_timeout": self.visibility_timeout,
                "unacked_restore_interval": self.unacked_restore_interval,
                "unacked_restore_throttle": self.unacked_restore_throttle,
            },
            "worker_pool": self.worker_pool,
            "worker_max_tasks_per_child": self.worker_max_tasks_per_child,
            "broker_connection_timeout": self.broker_connection_timeout,
        }
        if self.worker_concurrency is not None:
            conf["worker_concurrency"] = self.worker_concurrency
        return conf

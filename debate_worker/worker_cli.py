"""parley worker: the Celery worker that runs debate jobs.

Registered into the root CLI (``parley_cli``); ``python -m debate_worker.worker_cli worker`` runs it
alone. Celery, the engine and the embedded LLM are imported inside the command so parley --help stays
instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.llm import ModelNotServed, check_models_served, embedded_from_settings
from services.observability import telemetry
from services.observability.logging_setup import bind_celery_task_logs, configure_logging
from services.observability.metrics import enable_multiprocess, serve_metrics, worker_metrics_dir
from services.observability.settings import ObservabilitySettings
from services.redis_connect import check_redis_at_start

if TYPE_CHECKING:
    from debate_worker.worker_settings import WorkerSettings

app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False)


@app.callback()
def worker_commands() -> None:
    """The debate worker."""


@app.command("worker")
def run_worker(
    concurrency: Annotated[
        int | None, typer.Option(help="processes/threads (PARLEY_WORKER_WORKER_CONCURRENCY)")
    ] = None,
    pool: Annotated[
        str | None, typer.Option(help="prefork, threads or solo (PARLEY_WORKER_WORKER_POOL)")
    ] = None,
    queues: Annotated[str | None, typer.Option(help="comma-separated queues (default both)")] = None,
    llm_url: Annotated[str | None, typer.Option(help="LLM base URL (overrides PARLEY_LLM_BASE_URL)")] = None,
    loglevel: Annotated[str, typer.Option(help="Celery log level")] = "INFO",
    hostname: Annotated[str | None, typer.Option(help="Celery node name")] = None,
) -> None:
    """Start a Celery worker that runs debate jobs; settings from PARLEY_WORKER_*.

    Without an LLM URL (PARLEY_LLM_BASE_URL or --llm-url) the worker starts the embedded
    llama.cpp server once and every worker process shares it.
    """
    # lazy: `parley --help` must not load Celery, the worker's runtime and their dependencies
    from debate_worker.celery_app import create_worker_app
    from debate_worker.celery_restarts import (
        RestartBudget,
        run_until_stopped,
        watch_shutdown_requests,
        worker_starter,
    )
    from debate_worker.runtime import WorkerRuntime
    from debate_worker.worker_settings import WorkerSettings

    settings = WorkerSettings()
    check_redis_at_start("parley worker", settings.redis_spec(), settings.broker_spec())
    observability = observe_worker(settings)
    runtime = WorkerRuntime.from_env(settings)
    runtime.llm_base_url = llm_url or runtime.llm.base_url
    embedded = None
    if runtime.llm_base_url is not None:
        # A model name the server does not serve stops the worker here, not at its first debate.
        try:
            check_models_served(runtime.llm.model_copy(update={"base_url": runtime.llm_base_url}))
        except ModelNotServed as exc:
            typer.echo(f"ModelNotServed: {exc}", err=True)
            raise typer.Exit(2) from None
    if runtime.llm_base_url is None:
        embedded = embedded_from_settings(runtime.llm)
        server = embedded.__enter__()
        runtime.served = server.served()
        runtime.llm_base_url = server.base_url
        typer.echo(f"embedded LLM ({server.kind}) at {runtime.llm_base_url}")
    celery = create_worker_app(settings, runtime)
    if settings.metrics_port:
        # In the main process, before the pool forks: it stays up while children are recycled.
        try:
            serve_metrics(settings.metrics_port, settings.metrics_host)
        except OSError as exc:
            # A second worker on this host: it still runs jobs; its metrics need a port of its own.
            typer.echo(
                f"worker /metrics not served on port {settings.metrics_port} ({exc.strerror}); "
                "give each worker on a host its own PARLEY_WORKER_METRICS_PORT",
                err=True,
            )
    argv = ["worker", f"--loglevel={loglevel}", "--without-gossip", "--without-mingle"]
    argv.append(f"--queues={queues or ','.join(settings.queues)}")
    if observability.log_format == "json":
        argv.insert(0, "--quiet")  # celery --quiet worker: the start-up banner is not a log line
    if concurrency is not None:
        argv.append(f"--concurrency={concurrency}")
    if pool is not None:
        argv.append(f"--pool={pool}")
    if hostname is not None:
        argv.append(f"--hostname={hostname}")
    budget = RestartBudget(settings.restart_on_failure, settings.restart_window_s)
    try:
        code = run_until_stopped(
            worker_starter(celery, argv),
            budget,
            delay_s=settings.restart_delay_s,
            stop_requested=watch_shutdown_requests(),
        )
    finally:
        if embedded is not None:
            embedded.__exit__(None, None, None)
    if code:
        raise typer.Exit(code)


def observe_worker(settings: WorkerSettings) -> ObservabilitySettings:
    """Metrics in multiprocess mode (the prefork children write files the main process serves),
    traces when an OTLP endpoint is set, and JSON logs through Celery's own logging hook."""
    observability = ObservabilitySettings()
    bind_celery_task_logs()
    if settings.metrics_port:
        enable_multiprocess(settings.metrics_dir or worker_metrics_dir())
    telemetry.configure_tracing(observability, "parley-worker")
    if observability.log_format == "json":
        # lazy: only the worker command loads Celery
        from celery.signals import setup_logging

        def json_logging(loglevel: Any = None, **_: Any) -> None:
            # A receiver of this signal replaces Celery's logging set-up, in the main process and in
            # every pool process.
            configure_logging("json", loglevel or "INFO", service="worker")

        setup_logging.connect(json_logging, weak=False)
        # Now as well: Celery warns (e.g. about running as root) before it sets up logging.
        configure_logging("json", "INFO", service="worker")
    return observability


if __name__ == "__main__":
    app()

"""parley api, parley submit and parley hash-key: the gateway and its clients.

Registered into the root CLI (``parley_cli``). Heavy modules (FastAPI, uvicorn) are imported inside
the commands so parley --help stays instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False)


@app.command("api")
def serve_api(
    host: Annotated[str | None, typer.Option(help="bind address (default PARLEY_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default PARLEY_API_PORT)")] = None,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
) -> None:
    """Serve the API gateway (FastAPI under uvicorn); settings from PARLEY_API_*."""
    import uvicorn

    from api.settings import ApiSettings, exposure_error

    settings = ApiSettings()
    bind_host = host or settings.host
    bind_port = port or settings.port
    refusal = exposure_error(settings, bind_host)
    if refusal is not None:
        typer.echo(f"parley api: {refusal}", err=True)
        raise typer.Exit(2)
    logging_kw = _api_logging()
    if workers > 1:
        import tempfile

        from services.metrics import enable_multiprocess

        # The worker processes write metric files that any of them sums up for /metrics.
        enable_multiprocess(Path(tempfile.gettempdir()) / f"parley-api-{bind_port}")
        # Each uvicorn worker process builds its own app (and Redis pool) from the environment.
        uvicorn.run(
            "api.cli:app_from_env",
            factory=True,
            host=bind_host,
            port=bind_port,
            workers=workers,
            proxy_headers=True,
            **logging_kw,
        )
        return
    from api.app import create_app

    uvicorn.run(create_app(settings), host=bind_host, port=bind_port, proxy_headers=True, **logging_kw)


def _api_logging() -> dict[str, Any]:
    """JSON logs when PARLEY_LOG_FORMAT=json: ours for every logger, and uvicorn told to keep out."""
    from services.logging_setup import configure_logging
    from services.settings import ObservabilitySettings

    if ObservabilitySettings().log_format != "json":
        return {}
    configure_logging("json", "INFO", service="api")
    return {"log_config": None}


def app_from_env() -> Any:
    """The uvicorn factory for multi-process serving."""
    from api.app import create_app
    from api.settings import ApiSettings

    _api_logging()
    return create_app(ApiSettings())


@app.command("submit")
def submit(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="JSONL of {id?, question, answers?}")
    ],
    config: Annotated[str | None, typer.Option(help="DebateConfig as JSON, or @file.json")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait and write the results file")] = False,
    out: Annotated[Path | None, typer.Option(help="results file (default FILE.results.jsonl)")] = None,
    api_url: Annotated[str | None, typer.Option("--api", help="API base URL (PARLEY_API_URL)")] = None,
    poll: Annotated[float, typer.Option(help="seconds between progress polls")] = 1.0,
    idempotency_key: Annotated[str | None, typer.Option(help="makes a repeated submit safe")] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="with --wait: stop waiting after this many seconds, write what finished, "
            "list the unfinished items and exit 3"
        ),
    ] = None,
) -> None:
    """Submit a JSONL file as one batch; with --wait show progress and write the results."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from api.client import ApiClientSettings, ApiError, ParleyClient

    settings = ApiClientSettings()
    cfg: dict[str, Any] = {}
    if config:
        text = Path(config[1:]).read_text() if config.startswith("@") else config
        cfg = json.loads(text)
    client = ParleyClient.from_settings(settings)
    if api_url:
        key = settings.key.get_secret_value() if settings.key else None
        client = ParleyClient(api_url, api_key=key, timeout_s=settings.client_timeout_s)
    with client:
        try:
            accepted = client.submit_batch_file(file, cfg, idempotency_key=idempotency_key)
        except ApiError as exc:
            typer.echo(f"rejected: {exc}", err=True)
            for err in exc.problem.get("errors", [])[:20]:
                typer.echo(f"  {err}", err=True)
            raise typer.Exit(2) from exc
        batch_id = accepted["batch_id"]
        typer.echo(json.dumps(accepted))
        if not wait:
            return
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns) as progress:
            task = progress.add_task(batch_id, total=accepted["total"], detail="")

            def show(status: dict[str, Any]) -> None:
                c = status["counts"]
                done = c["completed"] + c["failed"] + c["cancelled"]
                detail = f"running {c['retrieving'] + c['debating']}, failed {c['failed']}"
                progress.update(task, completed=done, detail=detail)

            try:
                client.wait_batch(batch_id, poll_s=poll, on_progress=show, timeout_s=timeout)
                timed_out = False
            except TimeoutError:
                timed_out = True
        target = out or file.with_suffix(".results.jsonl")
        n = failed = 0
        unfinished: list[dict[str, Any]] = []
        with target.open("w") as fh:
            for row in client.iter_results(batch_id):
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
                failed += row["status"] != "completed"
                if row["status"] in ("queued", "retrieving", "debating"):
                    unfinished.append(row)
        typer.echo(f"wrote {n} results to {target} ({failed} not completed)")
        if timed_out:
            typer.echo(
                f"batch {batch_id} did not finish within {timeout:.0f}s; "
                f"{len(unfinished)} item(s) unfinished:",
                err=True,
            )
            for row in unfinished[:50]:
                typer.echo(f"  {row['id']} ({row['job_id']}): {row['status']}", err=True)
            raise typer.Exit(3)


@app.command("hash-key")
def hash_key_cmd(key: Annotated[str, typer.Argument(help="the API key to hash")]) -> None:
    """Print the sha256 of an API key, the form PARLEY_API_KEYS takes ({"name": "<hash>"})."""
    from api.guards import hash_key

    typer.echo(hash_key(key))


if __name__ == "__main__":
    app()

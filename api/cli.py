"""parley api, parley submit and parley hash-key: the gateway and its clients.

Registered into the root CLI (``parley_cli``). Heavy modules (FastAPI, uvicorn) are imported inside
the commands so parley --help stays instant.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from api.settings import ApiSettings, exposure_error
from services.observability.logging_setup import configure_logging
from services.observability.metrics import enable_multiprocess
from services.observability.settings import ObservabilitySettings
from services.redis_connect import check_redis_at_start

if TYPE_CHECKING:
    from parley_client import AsyncParleyClient, BatchAccepted, BatchResult, BatchView

app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False)


@app.command("api")
def serve_api(
    host: Annotated[str | None, typer.Option(help="bind address (default PARLEY_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default PARLEY_API_PORT)")] = None,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
) -> None:
    """Serve the API gateway (FastAPI under uvicorn); settings from PARLEY_API_*."""
    # lazy: uvicorn loads when the gateway starts, not for `parley --help`
    import uvicorn

    settings = ApiSettings()
    bind_host = host or settings.host
    bind_port = port or settings.port
    refusal = exposure_error(settings, bind_host)
    if refusal is not None:
        typer.echo(f"parley api: {refusal}", err=True)
        raise typer.Exit(2)
    check_redis_at_start("parley api", settings.redis_spec(), settings.broker_spec())
    logging_kw = _api_logging()
    if workers > 1:
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
    # lazy: FastAPI, Redis and the gateway's routes load when it starts, not for `parley --help`
    from api.app import create_app

    uvicorn.run(create_app(settings), host=bind_host, port=bind_port, proxy_headers=True, **logging_kw)


def _api_logging() -> dict[str, Any]:
    """JSON logs when PARLEY_LOG_FORMAT=json: ours for every logger, and uvicorn told to keep out."""
    if ObservabilitySettings().log_format != "json":
        return {}
    configure_logging("json", "INFO", service="api")
    return {"log_config": None}


def app_from_env() -> Any:
    """The uvicorn factory for multi-process serving."""
    # loaded in each uvicorn worker process, not when the CLI module is imported
    from api.app import create_app

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
    # httpx and pydantic-settings load when the command runs, not for parley --help
    from parley_client import AsyncParleyClient, ClientSettings

    cfg: dict[str, Any] = {}
    if config:
        text = Path(config[1:]).read_text() if config.startswith("@") else config
        cfg = json.loads(text)
    client = AsyncParleyClient.from_settings(ClientSettings(), url=api_url)
    job = SubmitJob(
        file, cfg, wait=wait, out=out, poll=poll, idempotency_key=idempotency_key, timeout=timeout
    )
    code = asyncio.run(job.run(client))
    if code:
        raise typer.Exit(code)


@dataclasses.dataclass
class SubmitJob:
    """``parley submit``: upload, then (with ``wait``) a progress bar and the results file."""

    file: Path
    config: dict[str, Any]
    wait: bool
    out: Path | None
    poll: float
    idempotency_key: str | None
    timeout: float | None

    async def run(self, client: AsyncParleyClient) -> int:
        """The exit code: 0 done, 2 refused, 3 not finished within ``timeout``."""
        # the client (httpx) loads when the command runs, not for parley --help
        from parley_client import ParleyError

        async with client:
            try:
                accepted = await client.submit_batch(
                    self.file, self.config, idempotency_key=self.idempotency_key
                )
            except ParleyError as exc:
                typer.echo(f"rejected: {exc}", err=True)
                for err in exc.problem.get("errors", [])[:20]:
                    typer.echo(f"  {err}", err=True)
                return 2
            typer.echo(accepted.model_dump_json())
            if not self.wait:
                return 0
            timed_out = await self._wait(client, accepted)
            return await self._write_results(client, accepted.batch_id, timed_out)

    async def _wait(self, client: AsyncParleyClient, accepted: BatchAccepted) -> bool:
        # rich's progress bar is needed only with --wait
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns) as progress:
            task = progress.add_task(accepted.batch_id, total=accepted.total, detail="")

            def show(status: BatchView) -> None:
                c = status.counts
                done = c["completed"] + c["failed"] + c["cancelled"]
                detail = f"running {c['retrieving'] + c['debating']}, failed {c['failed']}"
                progress.update(task, completed=done, detail=detail)

            try:
                await client.wait_batch(
                    accepted.batch_id, poll_s=self.poll, on_progress=show, timeout_s=self.timeout
                )
            except TimeoutError:
                return True
        return False

    async def _write_results(self, client: AsyncParleyClient, batch_id: str, timed_out: bool) -> int:
        target = self.out or self.file.with_suffix(".results.jsonl")
        n = failed = 0
        unfinished: list[BatchResult] = []
        with target.open("w") as fh:
            async for line in client.iter_results(batch_id):
                fh.write(line.model_dump_json() + "\n")
                n += 1
                failed += line.status != "completed"
                if line.status in ("queued", "retrieving", "debating"):
                    unfinished.append(line)
        typer.echo(f"wrote {n} results to {target} ({failed} not completed)")
        if not timed_out:
            return 0
        typer.echo(
            f"batch {batch_id} did not finish within {self.timeout:.0f}s; "
            f"{len(unfinished)} item(s) unfinished:",
            err=True,
        )
        for row in unfinished[:50]:
            typer.echo(f"  {row.id} ({row.job_id}): {row.status}", err=True)
        return 3


@app.command("hash-key")
def hash_key_cmd(key: Annotated[str, typer.Argument(help="the API key to hash")]) -> None:
    """Print the sha256 of an API key, the form PARLEY_API_KEYS takes ({"name": "<hash>"})."""
    # api.guards imports Redis and Starlette: loaded when the command runs, not for parley --help
    from api.guards import hash_key

    typer.echo(hash_key(key))


if __name__ == "__main__":
    app()

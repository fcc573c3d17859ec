"""``parley mcp``: serve Parley's tools to MCP clients, through a gateway or with debates in this process."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from rich.console import Console

from api.settings import is_loopback
from inprocess.local_debate import LocalDebater
from parley_client.settings import ClientSettings
from services.llm import LLMSettings


def mcp_command(
    transport: Annotated[
        str, typer.Option(help="stdio (an MCP client starts this command) or http (streamable HTTP at /mcp)")
    ] = "stdio",
    host: Annotated[str, typer.Option(help="http: bind address (loopback only)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: port")] = 8765,
    api_url: Annotated[str | None, typer.Option("--api", help="gateway URL (PARLEY_API_URL)")] = None,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process",
            help="debate in this process (PARLEY_LLM_*, else the embedded model) instead of through a "
            "gateway; batches run one item at a time",
        ),
    ] = False,
) -> None:
    """Serve Parley as MCP tools (debate, batches, transcripts) through a gateway and its key.

    The key comes from PARLEY_API_KEY, never the command line. Over HTTP the server answers anyone
    who can reach it with that key's quota, so it binds loopback addresses only.
    """
    # lazy: the MCP server brings mcp, starlette and uvicorn (~350 ms), not for `parley --help`
    from parley_client.mcp_server import ParleyTools, build_server

    chosen: Literal["stdio", "http"]
    if transport == "stdio":
        chosen = "stdio"
    elif transport == "http":
        chosen = "http"
    else:
        typer.echo(f"parley mcp: unknown transport {transport!r}; use stdio or http", err=True)
        raise typer.Exit(2)
    if chosen == "http" and not is_loopback(host):
        typer.echo(
            f"parley mcp: refusing to serve on {host}: the MCP server has no authentication of its own "
            "and spends its gateway key for every caller; bind a loopback address",
            err=True,
        )
        raise typer.Exit(2)
    if in_process:
        _serve_in_process(chosen, host, port)
        return
    settings = ClientSettings()
    key = settings.key.get_secret_value() if settings.key else None
    server = build_server(ParleyTools(api_url or settings.url, key, settings.client_timeout_s))
    if chosen == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)


def _serve_in_process(transport: Literal["stdio", "http"], host: str, port: int) -> None:
    """Debates in this process; progress of model preparation goes to stderr (stdout is MCP's)."""
    # lazy: the MCP tools and server bring mcp, starlette and uvicorn (~350 ms), not for `parley --help`
    from inprocess.mcp_tools import LocalTools
    from parley_client.mcp_server import build_server

    debater = LocalDebater(LLMSettings(), Console(stderr=True))
    server = build_server(LocalTools(debater))
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
    finally:
        debater.close()

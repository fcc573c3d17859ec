"""The ``parley`` command: a root that only assembles the sub-commands each package defines.

Nothing imports this package, so no product package depends on another's command line: the gateway's
commands live in ``api.cli``, the worker's in ``debate_worker.worker_cli``, the retriever's in
``retriever.cli``, and so on. Those modules keep torch, pyserini, FastAPI and Celery inside their
commands, so ``parley --help`` answers at once.
"""

from __future__ import annotations

import typer

HELP = "Retrieval-augmented multi-agent debate: ask questions, run the services, evaluate protocols."


def build_app() -> typer.Typer:
    """The root command with every package's sub-commands registered (imported here, not at import)."""
    from api.cli import app as gateway_app  # api, submit, hash-key
    from debate_worker.worker_cli import run_worker
    from evaluation.ask_cli import ask
    from evaluation.cli import eval_command
    from evaluation.kks.cli import kks_app
    from parley_cli.up import up
    from parley_client.cli import mcp_command
    from retriever.cli import index_app, serve
    from services.llm_cli import llm_app

    app = typer.Typer(name="parley", help=HELP, no_args_is_help=True, pretty_exceptions_show_locals=False)
    app.command("ask")(ask)
    app.command("eval")(eval_command)
    app.command("retriever")(serve)
    app.add_typer(index_app, name="index")
    app.add_typer(gateway_app)
    app.command("worker")(run_worker)
    app.add_typer(kks_app, name="kks")
    app.command("mcp")(mcp_command)
    app.add_typer(llm_app, name="llm")
    app.command("up")(up)
    return app


def main() -> None:
    build_app()()

"""The ``parley`` command: a root that only assembles the sub-commands each package defines.

Nothing imports this package, so no product package depends on another's command line: the gateway's
commands live in ``api.cli``, the worker's in ``debate_worker.worker_cli``, the retriever's in
``retriever.cli``, and so on. Those modules keep torch, pyserini, FastAPI and Celery inside their
commands, so ``parley --help`` answers at once.
"""

from __future__ import annotations

from types import SimpleNamespace

import typer

HELP = "Retrieval-augmented multi-agent debate: ask questions, run the services, evaluate protocols."


def build_app() -> typer.Typer:
    """The root command with every package's sub-commands registered (imported here, not at import)."""
    # lazy: a parley_cli module (up, mcp, probes) imports this package first; it must not load every
    # package's commands. Only the entry point builds them (`parley --help` needs them all anyway).
    from api.cli import app as gateway_app  # api, submit, hash-key
    from debate_worker.worker_cli import run_worker
    from evaluation.cli import eval_command
    from evaluation.kks.cli import kks_app
    from inprocess.ask_cli import ask
    from inprocess.evaluate import evaluate_in_process
    from parley_cli.mcp import mcp_command
    from parley_cli.up import up
    from retriever.cli import index_app, serve
    from services.llm import llm_app, models_app

    # What the sub-commands are handed rather than import: `parley eval` runs in this process through
    # the in-process runner, which the harness may not import (it opens the retriever's index).
    wiring = SimpleNamespace(evaluate_in_process=evaluate_in_process)
    app = typer.Typer(
        name="parley",
        help=HELP,
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        context_settings={"obj": wiring},
    )
    app.command("ask")(ask)
    app.command("eval")(eval_command)
    app.command("retriever")(serve)
    app.add_typer(index_app, name="index")
    app.add_typer(gateway_app)
    app.command("worker")(run_worker)
    app.add_typer(kks_app, name="kks")
    app.command("mcp")(mcp_command)
    app.add_typer(llm_app, name="llm")
    app.add_typer(models_app, name="models")
    app.command("up")(up)
    return app


def main() -> None:
    build_app()()

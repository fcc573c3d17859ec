"""The ``parley`` command line. Sub-commands live next to the code they drive and register here.

Imports stay light: torch, pyserini and the Celery app are imported inside the commands that need them,
so ``parley --help`` answers at once.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="parley",
    help="Retrieval-augmented multi-agent debate: ask questions, run the services, evaluate protocols.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

from debate_worker.ask_cli import ask  # noqa: E402

app.command("ask")(ask)

# sub-command registrations (one line each; keep imports light)
app.command("eval")(__import__("debate_worker.evaluation.cli", fromlist=["x"]).eval_command)
app.add_typer(__import__("api.cli", fromlist=["x"]).app)  # api, worker, submit, hash-key
app.add_typer(__import__("retriever.cli", fromlist=["x"]).index_app, name="index")  # index build|stats
app.command("retriever")(__import__("retriever.cli", fromlist=["x"]).serve)
# end of sub-command registrations


def main() -> None:
    app()


if __name__ == "__main__":
    main()

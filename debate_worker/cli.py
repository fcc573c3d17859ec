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

# Sub-commands; each module keeps heavy imports (torch, pyserini, Celery) inside its commands.
from api.cli import app as gateway_app  # noqa: E402  (api, worker, submit, hash-key)
from debate_worker.ask_cli import ask  # noqa: E402
from debate_worker.evaluation.cli import eval_command  # noqa: E402
from retriever.cli import index_app, serve  # noqa: E402

app.command("ask")(ask)
app.command("eval")(eval_command)
app.command("retriever")(serve)
app.add_typer(index_app, name="index")
app.add_typer(gateway_app)
# sub-command registrations (one line each; keep imports light)
app.add_typer(__import__("debate_worker.kks.cli", fromlist=["kks_app"]).kks_app, name="kks")
# end of sub-command registrations


def main() -> None:
    app()


if __name__ == "__main__":
    main()

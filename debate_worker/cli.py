"""The root command under its former name, for callers of ``python -m debate_worker.cli``.

The root lives in ``parley_cli`` (the installed ``parley`` script), which no package imports; no
product module imports this one either. It goes once the evaluation tests import ``parley_cli``.
"""

from __future__ import annotations

from parley_cli import build_app

app = build_app()


def main() -> None:
    app()


if __name__ == "__main__":
    main()

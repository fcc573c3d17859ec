"""``python -m parley_cli``: the ``parley`` command without the installed script."""

from parley_cli import main

main()

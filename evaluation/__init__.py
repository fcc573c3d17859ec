"""The evaluation harness behind ``parley eval``.

Datasets are loaded into ``Item``s (``datasets``), every protocol × prompt style is run over the same
items with the same knowledge pools (``runner`` in-process, ``api_client`` through the batch API),
each answer is scored as it completes (``scoring``, ``metrics``, ``judge``) and written to an
append-only results file per run (``store``), and ``report`` turns those files into ``metrics.json``,
a Markdown report and PNG plots (``plots``).
"""

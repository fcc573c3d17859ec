"""The evaluation harness behind ``parley eval``: it runs debate protocols over a dataset and reports,
with confidence intervals, which answers better and at what cost.

Datasets are loaded into ``Item``s (``datasets``, ``items`` and a module per format family), every
protocol × prompt style is run over the same items with the same knowledge pools (``runner`` and
``eval_pools`` in-process, ``api_client`` through the batch API, both through ``run_loop``; the
same-budget vote in ``same_budget``), each answer is scored as it completes (``scoring``, ``metrics``,
``judge``) and written to an append-only results file per run (``store``), and ``report`` turns those
files into ``metrics.json``, a Markdown report (``report_markdown``) and PNG plots (``plots``);
``suite`` runs and reports a named set of protocols (``suite_report``, ``suite_markdown``).
"""

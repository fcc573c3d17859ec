"""The benchmarks measure what Parley does on a real machine, so every figure the documentation quotes
comes from a command anyone can run again.

``bench.harness`` is the library the studies share: starting and stopping the processes under test,
driving load, reading ``/proc``, summary statistics, argument parsing and writing reports and plots.
Every other module here is one study (``python -m bench.<study> --help``), or a part of one
(``bench.soak_*`` are the soak's), and writes its results under ``reports/``.
"""

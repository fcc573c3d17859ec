"""The harness the benchmark studies share, so each study holds only what it measures.

By purpose: ``processes`` starts, waits for and stops the service processes (redis, the gateway,
scripted or embedded LLM servers) on loopback; ``stack`` holds Redis and the gateway for a study;
``batches`` drives a batch through the gateway; ``procfs`` reads memory and CPU from ``/proc``;
``stats`` summarises timings and paired differences; ``llm`` talks to an OpenAI-compatible server;
``retrieval`` scores pools and loads question files; ``cli`` holds the options studies share;
``reports`` writes JSON and Markdown with the facts of the run; ``plots`` draws PNGs with matplotlib.
Nothing here imports a study. ``reports``, ``plots`` and ``procfs`` need only the standard library
(and matplotlib to draw), so the stdlib-only studies run as scripts can use them.
"""

"""The harness the benchmark studies share, so each study holds only what it measures.

By purpose: ``processes`` starts, waits for and stops the service processes (redis, the gateway,
scripted or embedded LLM servers) on loopback; ``stack`` holds Redis and the gateway for a study;
``batches`` drives a batch through the gateway; ``scripted`` gives the in-process scripted LLM its
replies; ``llm`` calls an OpenAI-compatible server; ``procfs`` reads memory and CPU from ``/proc``;
``stats`` summarises timings and paired differences; ``questions`` reads question files;
``retrieval`` scores pools and writes the answer-in-pool reports; ``cli`` holds the options studies
share; ``reports`` writes JSON and Markdown with the facts of the run; ``plots`` draws PNGs with
matplotlib. Nothing here imports a study. ``reports`` and ``plots`` need only the standard library
(and matplotlib to draw), so the studies run as plain scripts can use them too.
"""

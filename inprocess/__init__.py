"""The in-process runner: one debate (``parley ask``, ``parley mcp --in-process``) or an evaluation run
in this process, on the configured or embedded LLM and the retrieval service or the embedded index.

It sits above the harness and the retriever: it may open the retriever's in-process face
(``retriever.local``), which no other process package may, and the harness never imports it.
"""

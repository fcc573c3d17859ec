"""What crosses the wire between the gateway and its clients, importable with httpx and pydantic alone.

``parley_wire.models`` holds the documents the gateway answers with (job, batch and usage views, the
streamed events, batch result lines) and the job status names; the gateway, the job store and the
Python client all use these, so a client never needs the gateway's code to read its answers.
``parley_wire.http`` is the one HTTP retry layer of Parley's clients (the LLM and retriever clients
and ``parley_client``): ``Retry-After``, backoff, problem documents told apart by ``type``.

Nothing of Parley's is imported here (an import-linter contract holds it), so ``parley_client`` can
be installed on its own with this package.
"""

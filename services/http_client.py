"""The shared HTTP retry layer, kept importable from here for the service clients (``services.llm``,
``services.retriever_client``); it lives in ``parley_wire.http`` so that the standalone
``parley_client`` uses the same one without importing ``services``."""

from parley_wire.http import RetryPolicy, Unreachable, parse_retry_after, read_problem, send_with_retries

__all__ = ["RetryPolicy", "Unreachable", "parse_retry_after", "read_problem", "send_with_retries"]

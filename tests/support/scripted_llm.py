"""The scripted OpenAI-compatible server, for the tests: it lives in ``parley_testing`` so the
benchmarks can import it as well, without reaching into ``tests/``."""

from parley_testing.scripted_llm import (
    ClosedPort,
    Failure,
    Reply,
    Rule,
    SchemaMode,
    ScriptedLLM,
    free_port,
    request_text,
    scripted_llm,
)

__all__ = [
    "ClosedPort",
    "Failure",
    "Reply",
    "Rule",
    "SchemaMode",
    "ScriptedLLM",
    "free_port",
    "request_text",
    "scripted_llm",
]

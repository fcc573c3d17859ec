"""Shared fixtures: a scripted OpenAI-compatible server per test and a client pointed at it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.scripted_llm import ScriptedLLM

# Model weights and data must come from installed packages, never a hub download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def scripted() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server

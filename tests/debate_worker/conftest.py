"""What the worker's job tests share: a scripted LLM whose agents agree at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.support import script_agreeing
from tests.support.scripted_llm import ScriptedLLM


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(latency_s=0.01) as server:
        script_agreeing(server)
        yield server

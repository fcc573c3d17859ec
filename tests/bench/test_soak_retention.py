"""The soak's retention reaches every process that keeps per-job state: the gateway and workers read
``PARLEY_JOB_TTL_S``, the retriever its pool TTL, under names its settings class really reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak_ledger import Ledger
from bench.soak_stack import SoakStack
from retriever.settings import RetrieverSettings


def test_a_retention_gives_the_retriever_a_pool_ttl_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = SoakStack(tmp_path, Ledger(), llm_latency_s=0.1, job_ttl_s=120)
    assert stack.retention == {"PARLEY_JOB_TTL_S": "120"}
    for name, value in stack.pool_retention.items():
        monkeypatch.setenv(name, value)
    settings = RetrieverSettings(data_dir=tmp_path)
    assert settings.pool_ttl_s == 120
    assert settings.sweep_interval_s == 60


def test_without_a_retention_every_process_keeps_its_default(tmp_path: Path) -> None:
    stack = SoakStack(tmp_path, Ledger(), llm_latency_s=0.1)
    assert stack.retention == {}
    assert stack.pool_retention == {}

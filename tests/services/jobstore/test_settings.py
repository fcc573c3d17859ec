"""``PARLEY_JOB_TTL_S``: one retention for gateway and workers; the old per-process names still count."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from services.jobstore.settings import DEFAULT_JOB_TTL_S, RetentionSettings


def test_default_and_the_one_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PARLEY_JOB_TTL_S", "PARLEY_API_JOB_TTL_S", "PARLEY_WORKER_JOB_TTL_S"):
        monkeypatch.delenv(name, raising=False)
    assert RetentionSettings().job_ttl_s == DEFAULT_JOB_TTL_S
    monkeypatch.setenv("PARLEY_JOB_TTL_S", "600")
    assert RetentionSettings().job_ttl_s == 600


@pytest.mark.parametrize("old", ["PARLEY_API_JOB_TTL_S", "PARLEY_WORKER_JOB_TTL_S"])
def test_a_deprecated_name_keeps_its_retention_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, old: str
) -> None:
    monkeypatch.delenv("PARLEY_JOB_TTL_S", raising=False)
    monkeypatch.setenv(old, "3600")
    with caplog.at_level(logging.WARNING, logger="services.settings"):
        assert RetentionSettings().job_ttl_s == 3600
    assert old in caplog.text and "PARLEY_JOB_TTL_S" in caplog.text


def test_the_new_name_wins_and_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_API_JOB_TTL_S", "3600")
    monkeypatch.setenv("PARLEY_JOB_TTL_S", "900")
    assert RetentionSettings().job_ttl_s == 900
    monkeypatch.setenv("PARLEY_JOB_TTL_S", "5")
    with pytest.raises(ValidationError):
        RetentionSettings()
    monkeypatch.delenv("PARLEY_JOB_TTL_S")
    monkeypatch.setenv("PARLEY_API_JOB_TTL_S", "5")
    with pytest.raises(ValidationError):
        RetentionSettings()

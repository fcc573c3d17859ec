"""The job store's retention, one setting read by the gateway and every worker alike."""

from __future__ import annotations

import logging
import os

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.settings import ParleySettings

log = logging.getLogger(__name__)

# A week: long enough to fetch a batch's results after a weekend; see RetentionSettings for sizing.
DEFAULT_JOB_TTL_S = 7 * 24 * 3600
DEPRECATED_JOB_TTL_NAMES = ("PARLEY_API_JOB_TTL_S", "PARLEY_WORKER_JOB_TTL_S")


class RetentionSettings(ParleySettings):
    """The job store's retention (``PARLEY_JOB_TTL_S``), read once at start-up by the gateway and by
    every worker alike: both write a job's keys and each write sets their expiry, so one setting
    decides how long a job is kept (Redis memory ≈ bytes per finished job × jobs per hour × retention
    in hours; see "Sizing Redis" in gateway-and-operations).

    One variable rather than one per process: a worker with its own retention re-expired every job it
    finished with that, whatever the gateway had been told.
    """

    model_config = SettingsConfigDict(env_prefix="PARLEY_", frozen=True, extra="ignore")

    job_ttl_s: int = Field(
        default=DEFAULT_JOB_TTL_S,
        ge=60,
        description="how long a finished job (record, result, events, its batch) is kept after its last "
        "write; an unfinished job never expires while the workers' sweep runs; gateway and workers",
    )

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: object) -> object:
        # The retention was once one setting per process: a deployment that still sets those names
        # keeps its retention (with a warning) instead of silently falling back to the default.
        if not isinstance(data, dict) or "job_ttl_s" in data:
            return data
        for old in DEPRECATED_JOB_TTL_NAMES:
            if old in os.environ:
                log.warning("%s is deprecated: set PARLEY_JOB_TTL_S (read by gateway and workers alike)", old)
                return {**data, "job_ttl_s": os.environ[old]}
        return data

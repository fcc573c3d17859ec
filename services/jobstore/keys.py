"""The key layout of the Redis job store.

``prefix`` defaults to ``parley``; every key expires ``ttl_s`` after the job's last status change::

    {p}:job:{id}              hash   the job record (status, owner, question, config, result, ...)
    {p}:job:{id}:events       stream job.queued, pool.ready, turn.completed, ..., job.completed
    {p}:job:{id}:checkpoint   string the engine's state after the last completed round
    {p}:job:{id}:lease        string which worker runs the job now (expires unless renewed)
    {p}:batch:{id}            hash   the batch record
    {p}:batch:{id}:jobs       list   job ids in input order
    {p}:owner:{owner}:active  set    the owner's jobs that are not finished (per-key queue limits)
    {p}:owner:{owner}:jobs    zset   the owner's recent job ids by created_at (listing; trimmed)
    {p}:owner:{owner}:batches zset   the owner's recent batch ids by created_at (listing; trimmed)
    {p}:usage:{owner}:{day}   hash   the owner's token use and reservations of a UTC day
    {p}:bytes:{owner}:{day}   int    bytes the owner wrote on that day (storage accounting)
"""

from __future__ import annotations

from services.jobstore.records import storage_key


class JobKeys:
    """The names of a store's keys under its ``prefix``."""

    prefix: str

    # -- keys ------------------------------------------------------------------------------------
    def k_job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def k_events(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:events"

    def k_checkpoint(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:checkpoint"

    def k_lease(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:lease"

    def k_batch(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}"

    def k_batch_jobs(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:jobs"

    def k_active(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner}:active"

    def k_usage(self, owner: str, day: str) -> str:
        return f"{self.prefix}:usage:{owner}:{day}"

    def k_owner_jobs(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner}:jobs"

    def k_owner_batches(self, owner: str) -> str:
        return f"{self.prefix}:owner:{owner}:batches"

    def k_bytes(self, owner: str, at: float | None = None) -> str:
        return storage_key(self.prefix, owner, at)

"""The key layout of the Redis job store.

``prefix`` defaults to ``parley``. Every key of a job expires ``ttl_s`` (the retention,
``PARLEY_JOB_TTL_S``) after the job's last write; an unfinished job is kept alive by the workers'
sweep, and its batch and the owner's listing indexes live at least as long as the job::

    {p}:job:{id}              hash   the job record (status, owner, question, config, ...); once
                                     finished also result_z (the result, packed) and events_z (the
                                     event stream, packed: ids, types and data)
    {p}:job:{id}:events       stream job.queued, pool.ready, turn.completed, ..., job.completed; a
                                     finished job's lapses a minute after it was packed
    {p}:job:{id}:checkpoint   string the engine's state after the last completed round (unfinished jobs)
    {p}:job:{id}:lease        string which worker runs the job now (expires unless renewed)
    {p}:job:{id}:deleted      hash   a deleted job's tombstone: its owner and usage day, so that a
                                     call in flight when it was deleted is still charged (``ttl_s``)
    {p}:batch:{id}            hash   the batch record
    {p}:batch:{id}:jobs       list   job ids in input order
    {p}:owner:{owner}:active  set    the owner's jobs that are not finished (per-key queue limits)
    {p}:owner:{owner}:jobs    zset   the owner's recent job ids by created_at (listing; trimmed, and
                                     ids of expired jobs pruned by the sweep)
    {p}:owner:{owner}:batches zset   the owner's recent batch ids by created_at (listing; likewise)
    {p}:usage:{owner}:{day}   hash   the owner's token use and reservations of a UTC day
    {p}:bytes:{owner}:{day}   int    bytes the owner wrote on that day (storage accounting)
    {p}:charges:{id}          set    ids of the charges applied to a job lately, so that one sent again
                                     after a lost connection is applied once (kept as long as the
                                     worker may retry, not with the job: no job data, gone soon after)
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

    def k_tombstone(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:deleted"

    def k_charges(self, job_id: str) -> str:
        return f"{self.prefix}:charges:{job_id}"

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

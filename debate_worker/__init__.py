"""The debate worker: a Celery process that takes queued debate jobs from the job store and runs each
to exactly one result (``tasks`` registers the task, ``job_runner`` and ``job_debate`` do the work,
``sweeper`` ends jobs whose worker was lost, ``worker_cli`` is ``parley worker``)."""

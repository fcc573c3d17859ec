"""A Redis failover under load, end to end: Sentinel promotes a replica and everything follows it.

A primary, two replicas and three sentinels (``parley_testing.redis_topologies.SentinelGroup``), the
gateway and a real Celery worker reaching Redis only through ``sentinel://`` URLs, a scripted LLM. A
batch runs; single debates are submitted and a probe writes as fast as it can while the replicas'
link falls behind for half a second and the primary is killed (SIGKILL). The scenario and what it
measures are in ``parley_testing.failover`` (``python -m bench.redis_failover`` reports the same).

With Redis's defaults (asynchronous replication) the writes the old primary acknowledged but had not
sent are gone, jobs submitted in that window among them; what exists still ends, each job once. With
``min-replicas-to-write 1`` and ``PARLEY_*_REDIS_WAIT_REPLICAS=1`` nothing acknowledged is lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from parley_testing.failover import run_failover
from parley_testing.processes import redis_binary

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _needs_redis() -> None:
    if redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")


def test_at_defaults_the_batch_completes_and_only_the_unreplicated_window_is_lost(tmp_path: Path) -> None:
    outcome = run_failover(tmp_path, safe=False, batch_items=8)
    print(outcome.summary())
    assert outcome.failover_s < 15
    assert outcome.unfinished == [], outcome.summary()
    assert outcome.completed_twice == []
    assert outcome.failed == {}
    # The batch was stored long before the failover: all of it is there and completed. What may be
    # lost are single debates accepted while the replicas were behind.
    assert outcome.completed + len(outcome.lost) == len(outcome.accepted)


def test_with_wait_and_min_replicas_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    outcome = run_failover(tmp_path, safe=True, batch_items=8)
    print(outcome.summary())
    assert outcome.lost == [], outcome.summary()
    assert outcome.writes_lost == 0, outcome.summary()
    assert outcome.unfinished == []
    assert outcome.completed_twice == []
    assert outcome.failed == {}
    assert outcome.completed == len(outcome.accepted)

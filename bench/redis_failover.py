"""What a Redis failover loses: acknowledged writes and accepted jobs, at Redis's defaults and with
the safe setting (``min-replicas-to-write 1`` on the servers, ``PARLEY_*_REDIS_WAIT_REPLICAS=1``).

Run:

    .venv/bin/python -m bench.redis_failover --trials 3 --out reports/redis-failover

Each trial is ``parley_testing.failover.run_failover``: a primary, two replicas and three sentinels on
loopback, the gateway and a real Celery worker through ``sentinel://`` URLs, a batch running, single
debates submitted every 0.1 s and a probe writing as fast as it can; the replicas' link holds back
everything for ``--lag`` seconds (as a slow or cut network would), then the primary is killed
(SIGKILL) and a replica promoted. Reported per setting, summed over the trials: jobs the gateway
accepted (202) and lost (404 afterwards), jobs left unfinished or completed twice, the probe's
acknowledged writes and how many of them the new primary lacks, and the failover time. Writes
``bench.json`` and ``bench.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.reports import (
    command_line,
    machine,
    report_head,
    table_head,
    utc_date,
    write_json,
    write_markdown,
)
from parley_testing.failover import run_failover

SUMMED = (
    "jobs_accepted",
    "jobs_lost",
    "jobs_unfinished",
    "jobs_completed_twice",
    "jobs_restored_by_worker",
    "acked_writes",
    "acked_writes_lost",
    "writes_refused",
)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--lag", type=float, default=0.5, help="seconds the replicas fall behind")
    parser.add_argument("--batch-items", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("reports/redis-failover"))
    args = parser.parse_args(argv)
    logging.getLogger("parley.api").setLevel(logging.ERROR)  # the 503s of the failover window
    trials: list[dict[str, Any]] = []
    for safe in (False, True):
        for trial in range(args.trials):
            with tempfile.TemporaryDirectory(prefix="failover-") as work:
                outcome = run_failover(Path(work), safe=safe, batch_items=args.batch_items, lag_s=args.lag)
            row = {"trial": trial, **outcome.summary()}
            print(row, flush=True)
            trials.append(row)
    totals = {
        setting: {key: sum(r[key] for r in trials if r["setting"] == setting) for key in SUMMED}
        | {"failover_s_max": max(r["failover_s"] for r in trials if r["setting"] == setting)}
        for setting in ("defaults", "safe")
    }
    result = {
        "trials": trials,
        "totals": totals,
        "lag_s": args.lag,
        "command": command_line("bench.redis_failover", argv),
        "machine": machine(),
        "date": utc_date(),
    }
    write_json(args.out / "bench.json", result)
    lines = [
        *report_head(
            "Redis failover: what is lost at the defaults and with the safe setting",
            f"`{result['command']}` on {result['machine']}, {result['date']}. {args.trials} trial(s) per "
            f"setting; the replicas' link held back everything for {args.lag} s before the primary was "
            "killed. Safe = `min-replicas-to-write 1` on the servers and `PARLEY_API_REDIS_WAIT_REPLICAS=1`"
            " / `PARLEY_WORKER_REDIS_WAIT_REPLICAS=1` (the probe does the same WAIT after each write).",
        ),
        *table_head(
            "setting",
            "jobs accepted",
            "jobs lost",
            "unfinished",
            "completed twice",
            "acked writes",
            "acked writes lost",
            "writes refused",
            "failover (max s)",
        ),
    ]
    for setting, t in totals.items():
        lines.append(
            f"| {setting} | {t['jobs_accepted']} | {t['jobs_lost']} | {t['jobs_unfinished']} | "
            f"{t['jobs_completed_twice']} | {t['acked_writes']} | {t['acked_writes_lost']} | "
            f"{t['writes_refused']} | {t['failover_s_max']} |"
        )
    print(write_markdown(args.out / "bench.md", lines))
    return result


if __name__ == "__main__":
    main()

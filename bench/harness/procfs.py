"""Memory and CPU of processes read from ``/proc`` (Linux), without a dependency: what a study reports
about the processes it runs."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid_dir: Path) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces): the state comes first."""
    return (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(entry)[1])
            except (OSError, IndexError, ValueError):
                continue
    pids, frontier = {pid}, {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - pids
        pids |= frontier
    return pids


def memory_mb(pid: int, *, tree: bool = True) -> tuple[float, float]:
    """Resident memory of ``pid`` and (``tree``) every process below it, in MB, read in one pass over
    their ``/proc/<pid>/status``: all of it (``VmRSS``) and its anonymous part (``RssAnon``: heaps, not
    the pages of mapped files such as a model's weights or a Qdrant shard's write-ahead log, which the
    kernel can drop and read again)."""
    pids = descendants(pid) if tree else {pid}
    rss = anon = 0
    for p in pids:
        try:
            for line in (PROC / str(p) / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, anon / 1024


def memory_mib(pid: int | str = "self") -> dict[str, float]:
    """Peak and current resident memory of one process in MiB (VmHWM, VmRSS, RssAnon, RssFile)."""
    out: dict[str, float] = {}
    for line in (PROC / str(pid) / "status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            out[key] = round(int(rest.split()[0]) / 1024, 1)
    return out


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of one process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(entry)
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields[0] is the state: pgrp is the 5th field of stat
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot: two readings give the machine's CPU use between."""
    values = [int(v) for v in (PROC / "stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))

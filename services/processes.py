"""Child processes Parley starts (the embedded model server, test and benchmark services): stopping one
so that a child stuck in its shutdown cannot hang the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(proc: subprocess.Popen[bytes] | None, timeout_s: float = 10, *, group: bool = False) -> None:
    """SIGTERM (to the whole session with ``group``), then SIGKILL if it has not ended in ``timeout_s``;
    a process that has already ended (or ``None``) is left alone."""
    if proc is None or proc.poll() is not None:
        return
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=10)

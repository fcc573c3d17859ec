"""Helper processes that must not outlive the command that started them."""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(parent: int, interval_s: float = 0.5) -> None:
    """End this helper process as soon as the process that started it is gone, however it ended.

    A SIGKILLed build runs no clean-up, and its pool's processes (an encoder holds ~420 MB) would
    otherwise live on with parent 1. A daemon thread polls the parent's pid rather than asking the
    kernel for PR_SET_PDEATHSIG, which fires when the *thread* that spawned the process exits, and a
    pool spawns its processes from whichever thread first submits work.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(1)

    if os.getppid() != parent:  # the parent died before this process got here
        os._exit(1)
    threading.Thread(target=watch, name="parley-parent-watch", daemon=True).start()

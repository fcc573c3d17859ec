"""A cached knowledge pool must not be told apart from a fresh one by its timing.

The retriever's pool cache is shared by every key, so a pool that comes back at once tells a key that
someone asked the same question recently. Results and events already carry no ``cached`` flag or
retrieval timings; this closes the timing side: a worker remembers how long the pools it built
without the cache took, and holds a cached pool back until that long (the median of the recent ones)
has passed since it asked, so ``pool.ready`` arrives when a fresh pool's would.
"""

from __future__ import annotations

import statistics
from collections import deque


class PoolTiming:
    """Recent uncached pool build times of this worker process, and the delay a cached pool owes."""

    def __init__(self, default_s: float, window: int = 50) -> None:
        self._default_s = default_s
        self._recent: deque[float] = deque(maxlen=window)

    def record(self, seconds: float) -> None:
        """An uncached pool took ``seconds`` to build."""
        self._recent.append(seconds)

    def typical(self) -> float:
        """How long a fresh pool takes here: the median of the recent builds, or the default."""
        return statistics.median(self._recent) if self._recent else self._default_s

    def hold_back(self, elapsed_s: float) -> float:
        """Seconds to wait before showing a cached pool that arrived after ``elapsed_s``."""
        return max(0.0, self.typical() - elapsed_s)

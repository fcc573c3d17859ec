"""Several servers of one model behind one endpoint: which replica each call goes to.

An operator's endpoint (``PARLEY_LLM_BASE_URL``, a role's ``…__BASE_URL``, a named endpoint's
``base_url``) may list several base URLs of the same model, comma-separated. The LLM client then asks
a ``ReplicaSet`` before every attempt where to send it:

* **Load.** A replica's load is its calls in flight: this process's (waiting for its concurrency
  limit included) plus, where the processes share their counts (``SharedReplicaLoad``: the worker
  processes of a deployment, through Redis), every other process's as last seen. Without shared
  counts (not configured, or the store unreachable) a process sees only its own calls, and the load
  of the others shows only in the replies: ties then go to the replica that answered fastest lately
  (an EWMA of its reply times).
* **Least outstanding requests.** Among the healthy replicas the least loaded gets the call; ties go
  to the one that answered fastest lately, then round robin.
* **Where a debate starts.** A debate's first call goes to the least loaded replica, ties broken by
  the order its key ranks them in (rendezvous hashing). Seeing only its own calls, a process instead
  chooses between the two replicas the key ranks highest (the power of two choices), so processes
  that cannot see each other's load still spread debates without all rushing to one replica.
* **Affinity.** A debate's calls (keyed by the job id of the worker's log context, or an explicit
  ``affinity(...)`` block) go to the replica its first call went to, while that replica is healthy,
  so the prefix its server cached for the previous turn is found again. A call spills over to
  another replica (the debate stays bound) only when that replica is full (``limit`` calls of this
  process in flight) and another has room, or, with shared counts, when it has ``spill_gap`` (2) or
  more calls in flight than the least loaded one (the call would queue behind others while a
  server idles: waiting costs more than a cached prefix saves). Only when its replies have become
  ``move_ratio`` (1.5) times slower than another replica's lately, and at least 50 ms slower, does
  the debate move there for good.
* **Ejection.** A replica that fails a call (connection error, 5xx, read timeout) is taken out for a
  cool-down that doubles with each consecutive failure (``cooldown_s`` … ``cooldown_max_s``); once it
  has passed, the next call is sent there as a probe (half-open: one call at a time) and its success
  takes the replica back. A debate bound to an ejected replica moves to another for good.

Retries are not done here: the LLM client's one retry loop (``parley_wire.http``) calls ``pick``
again for its next attempt, which avoids the replicas this call already tried while others are
usable. Health is shared by all sets in a process that list the same URL; a single URL is passed
straight through (no health state, exactly as before replicas existed).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import httpx

from services.observability.logging_setup import current_job_id
from services.observability.metrics import LLM_REPLICA_ATTEMPTS, LLM_REPLICA_EJECTIONS, LLM_REPLICA_IN_FLIGHT

Outcome = Literal["ok", "failed", "cancelled"]

log = logging.getLogger("parley.replicas")

_affinity: contextvars.ContextVar[str | None] = contextvars.ContextVar("parley_llm_affinity", default=None)


@contextlib.contextmanager
def affinity(key: str | None) -> Iterator[None]:
    """Calls made inside (in this task and the tasks it starts) share one replica: one debate's calls
    find the KV cache its previous calls left on that server."""
    token = _affinity.set(key)
    try:
        yield
    finally:
        _affinity.reset(token)


def affinity_key() -> str | None:
    """The key of the calls now being made: an explicit ``affinity`` block, else the worker's job."""
    explicit = _affinity.get()
    if explicit is not None:
        return explicit

    return current_job_id()


def split_base_urls(value: str) -> tuple[str, ...]:
    """The base URLs an operator's endpoint lists (comma-separated), checked: each an http(s) URL with
    a host, none twice. Raises ``ValueError`` with what is wrong, so settings fail at load."""
    parts = [p.strip() for p in value.split(",")]
    if not any(parts):
        raise ValueError("an LLM base URL is empty")
    seen: set[str] = set()
    urls: list[str] = []
    for part in parts:
        if not part:
            raise ValueError(f"empty entry in the list of LLM base URLs {value!r}")
        try:
            parsed = httpx.URL(part)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise ValueError(f"not a URL: {part!r} ({exc})") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"LLM base URLs must be http:// or https:// with a host, got {part!r}")
        normal = normal_base_url(part)
        if normal in seen:
            raise ValueError(f"LLM base URL listed twice: {part!r}")
        seen.add(normal)
        urls.append(part)
    return tuple(urls)


def normal_base_url(url: str) -> str:
    """A base URL as the client uses it: no trailing slash, ``/v1`` appended when missing."""
    u = url.strip().rstrip("/")
    return u if u.endswith("/v1") else u + "/v1"


@dataclass
class ReplicaHealth:
    """One server's state in this process (shared by every set that lists its URL)."""

    url: str
    outstanding: int = 0
    failures: int = 0  # consecutive failed calls; 0 = healthy
    down_until: float = 0.0
    probing: bool = False  # a half-open probe is in flight
    ewma_s: float | None = None  # recent reply time (None: no reply yet)

    def usable(self, now: float) -> bool:
        if self.failures == 0:
            return True
        return now >= self.down_until and not self.probing


class SharedReplicaLoad(Protocol):
    """Calls in flight per replica URL, shared by the processes that call the same replicas, so each
    sees the load the others put on a server (``services.llm.replica_load`` keeps them in Redis).

    Both methods return at once and never raise: a call is never held up or failed by the sharing,
    which at worst leaves a process with its own counts only."""

    def publish(self, counts: Mapping[str, int]) -> None:
        """This process's calls in flight per URL are now ``counts``."""
        ...

    def others(self) -> Mapping[str, int] | None:
        """The other processes' calls in flight per URL as last seen; None when not known lately."""
        ...


class ReplicaRegistry:
    """Process-wide health per URL. A lock keeps it consistent under a threads pool as well.

    ``shared``: where the process shares its calls in flight with the others (set once at start-up
    by the worker, ``share``); None: this process's counts only."""

    def __init__(self, shared: SharedReplicaLoad | None = None) -> None:
        self._states: dict[str, ReplicaHealth] = {}
        self.lock = threading.Lock()
        self._shared = shared

    def share(self, shared: SharedReplicaLoad | None) -> None:
        """Share this process's calls in flight through ``shared`` from now on (None: stop)."""
        self._shared = shared

    def others(self) -> Mapping[str, int] | None:
        """Other processes' calls in flight per URL, or None (not shared, or not known lately)."""
        shared = self._shared
        if shared is None:
            return None
        try:
            return shared.others()
        except Exception:  # the sharing never fails a call; the local counts still decide
            log.exception("shared replica load unreadable; using this process's counts")
            return None

    def changed(self) -> None:
        """Outstanding counts changed (the caller holds ``lock``): tell the other processes."""
        shared = self._shared
        if shared is None:
            return
        try:
            shared.publish({url: s.outstanding for url, s in self._states.items()})
        except Exception:
            log.exception("shared replica load not published; using this process's counts")

    def state(self, url: str) -> ReplicaHealth:
        with self.lock:
            found = self._states.get(url)
            if found is None:
                found = self._states[url] = ReplicaHealth(url)
            return found

    def clear(self) -> None:
        """Forget all health (tests)."""
        with self.lock:
            self._states.clear()


REPLICA_HEALTH = ReplicaRegistry()


# Weight of the newest reply time in a replica's EWMA: about the last five replies count.
EWMA_WEIGHT = 0.3


# A debate moves only for a gap of at least this much too: milliseconds of jitter are not load.
MOVE_MIN_GAP_S = 0.05

# Reply times closer than this (relative) are noise, not load: such replicas count as equal.
EWMA_MARGIN = 0.25


def _lighter_s(a: float, b: float) -> bool:
    """Reply time ``a`` is clearly shorter than ``b``."""
    return a < b * (1 - EWMA_MARGIN)


def _lighter(a: ReplicaHealth, b: ReplicaHealth) -> bool:
    """``a`` is less loaded than ``b``: fewer calls of this process in flight, else clearly faster
    replies lately (the load other processes put on it)."""
    if a.outstanding != b.outstanding:
        return a.outstanding < b.outstanding
    return _lighter_s(a.ewma_s or 0.0, b.ewma_s or 0.0)


def _load(state: ReplicaHealth, view: Mapping[str, int] | None) -> int:
    """Calls in flight at a replica: this process's, plus the other processes' where they are known."""
    return state.outstanding + (view.get(state.url, 0) if view is not None else 0)


def _rank(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{url}".encode(), digest_size=8).digest(), "big")


class ReplicaSet:
    """The replicas of one endpoint and the choice among them (see the module docstring)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        name: str = "default",
        limit: int = 4,
        cooldown_s: float = 5.0,
        cooldown_max_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        registry: ReplicaRegistry = REPLICA_HEALTH,
        max_keys: int = 10_000,
        move_ratio: float | None = 1.5,
        spill_gap: int | None = 2,
    ) -> None:
        if not urls:
            raise ValueError("a replica set needs at least one URL")
        self.urls = tuple(normal_base_url(u) for u in urls)
        self.name = name
        self.limit = limit
        self.cooldown_s = cooldown_s
        self.cooldown_max_s = max(cooldown_s, cooldown_max_s)
        self._clock = clock
        self._registry = registry
        self._states = [registry.state(u) for u in self.urls]
        self._index = {u: i for i, u in enumerate(self.urls)}
        self._bound: OrderedDict[str, str] = OrderedDict()  # affinity key -> URL, least recent first
        self._max_keys = max_keys
        self.move_ratio = move_ratio
        self.spill_gap = spill_gap
        self._turn = itertools.count()

    def __len__(self) -> int:
        return len(self.urls)

    def index(self, url: str) -> int:
        return self._index[url]

    def healthy(self, url: str) -> bool:
        return self._states[self._index[url]].failures == 0

    def bound(self, key: str) -> str | None:
        """The replica ``key``'s calls go to (None before its first call)."""
        return self._bound.get(key)

    def pick(self, key: str | None = None, avoid: Collection[str] = ()) -> str:
        """The replica the next attempt goes to; the caller must ``release`` it when the attempt ends."""
        if len(self.urls) == 1:
            with self._registry.lock:
                self._states[0].outstanding += 1
            _observe_pick(self.name, 0)
            return self.urls[0]
        view = self._registry.others()
        with self._registry.lock:
            now = self._clock()
            usable = [s for s in self._states if s.usable(now)]
            fresh = [s for s in usable if s.url not in avoid]
            candidates = fresh or usable
            if not candidates:
                # All out: try the one whose cool-down ends first (the retry loop paces the attempts).
                candidates = [min(self._states, key=lambda s: s.down_until)]
            chosen = self._choose(key, candidates, view)
            if chosen.failures:
                chosen.probing = True  # half-open: this call is the probe
            chosen.outstanding += 1
            self._registry.changed()
        _observe_pick(self.name, self._index[chosen.url])
        return chosen.url

    def _choose(
        self, key: str | None, candidates: list[ReplicaHealth], view: Mapping[str, int] | None
    ) -> ReplicaHealth:
        least = min(s.outstanding for s in candidates)
        if key is not None:
            bound_url = self._bound.get(key)
            bound = self._states[self._index[bound_url]] if bound_url is not None else None
            if bound is not None and bound.failures == 0:
                self._bound.move_to_end(key)
                if bound in candidates and (bound.outstanding < self.limit or least >= self.limit):
                    better = self._congested(bound, candidates)
                    if better is not None:
                        self._bind(key, better.url)  # the debate moves to where replies come faster
                        return better
                    # Crowded by every process's calls while another idles: this call goes there.
                    return self._crowded(bound, candidates, view) or bound
                # Full while another has room, or already tried by this call (a 429): this attempt
                # goes to the least loaded other replica, the debate stays bound.
                return self._least(None, [c for c in candidates if c is not bound] or candidates, view)
            chosen = self._least(key, candidates, view)
            self._bind(key, chosen.url)  # its first call, or its replica was taken out
            return chosen
        return self._least(None, candidates, view)

    def _crowded(
        self, bound: ReplicaHealth, candidates: list[ReplicaHealth], view: Mapping[str, int] | None
    ) -> ReplicaHealth | None:
        """The least loaded other replica when ``bound`` has ``spill_gap`` or more calls in flight
        than it, all processes counted; else None. Only with shared counts: a process's own calls
        alone are what ``limit`` already bounds."""
        if view is None or self.spill_gap is None:
            return None
        others = [c for c in candidates if c is not bound and c.outstanding < self.limit]
        if not others:
            return None
        best = min(others, key=lambda c: _load(c, view))
        return best if _load(bound, view) - _load(best, view) >= self.spill_gap else None

    def _congested(self, bound: ReplicaHealth, candidates: list[ReplicaHealth]) -> ReplicaHealth | None:
        """Another replica when ``bound`` replies ``move_ratio`` times slower than it lately (other
        processes crowd it), else None: a debate leaves its cache only for a clear gain."""
        if self.move_ratio is None or bound.ewma_s is None:
            return None
        # Only replicas whose reply times this process has seen compare (an unseen one proves nothing).
        others = [
            c for c in candidates if c is not bound and c.outstanding < self.limit and c.ewma_s is not None
        ]
        if not others:
            return None
        best = min(others, key=lambda c: (c.outstanding, c.ewma_s or 0.0))
        best_s = best.ewma_s or 0.0
        if bound.ewma_s > self.move_ratio * best_s and bound.ewma_s - best_s > MOVE_MIN_GAP_S:
            return best
        return None

    def _least(
        self, key: str | None, candidates: list[ReplicaHealth], view: Mapping[str, int] | None
    ) -> ReplicaHealth:
        if key is not None:
            ranked = sorted(candidates, key=lambda s: _rank(key, s.url), reverse=True)
            if view is not None:
                # Every process's load is known: the least loaded, ties in the key's order.
                return min(ranked, key=lambda s: _load(s, view))
            # The power of two choices: the key's two highest-ranked replicas, the less loaded one.
            two = ranked[:2]
            return two[1] if len(two) == 2 and _lighter(two[1], two[0]) else two[0]
        least = min(_load(s, view) for s in candidates)
        tied = [s for s in candidates if _load(s, view) == least]
        fastest = min(s.ewma_s or 0.0 for s in tied)
        tied = [s for s in tied if not _lighter_s(fastest, s.ewma_s or 0.0)]
        return tied[next(self._turn) % len(tied)]

    def _bind(self, key: str, url: str) -> None:
        self._bound[key] = url
        self._bound.move_to_end(key)
        while len(self._bound) > self._max_keys:
            self._bound.popitem(last=False)

    def release(self, url: str, outcome: Outcome, latency_s: float | None = None) -> None:
        """The attempt sent to ``url`` ended: ``ok`` (the server answered, whatever the status short of
        a 5xx; ``latency_s`` is how long it took), ``failed`` (unreachable, 5xx, read timeout) or
        ``cancelled`` (no verdict)."""
        i = self._index[url]
        state = self._states[i]
        ejected = False
        with self._registry.lock:
            state.outstanding = max(0, state.outstanding - 1)
            if len(self.urls) == 1:
                pass  # one URL: no choice to share counts for, no health state
            elif outcome == "ok":
                if latency_s is not None:
                    old = state.ewma_s
                    state.ewma_s = latency_s if old is None else old + EWMA_WEIGHT * (latency_s - old)
                state.failures = 0
                state.down_until = 0.0
                state.probing = False
            elif outcome == "failed":
                ejected = state.failures == 0
                state.failures += 1
                cooldown = min(self.cooldown_max_s, self.cooldown_s * 2 ** (state.failures - 1))
                state.down_until = self._clock() + cooldown
                state.probing = False
            else:
                state.probing = False
            if len(self.urls) > 1:
                self._registry.changed()
        _observe_release(self.name, i, outcome, ejected)

    def others_usable(self, tried: Collection[str]) -> bool:
        """Whether a replica this call has not tried could take it now (a timed-out call fails over
        only then; otherwise the timeout stands, as with one URL)."""
        if len(self.urls) == 1:
            return False
        with self._registry.lock:
            now = self._clock()
            return any(s.usable(now) and s.url not in tried for s in self._states)

    def snapshot(self) -> list[dict[str, object]]:
        """Per replica: index, in flight (this process's; ``load``: every process's where shared),
        consecutive failures, seconds until a probe (for tests and operators; metrics carry the same
        by index, never a URL)."""
        now = self._clock()
        view = self._registry.others()
        with self._registry.lock:
            return [
                {
                    "replica": i,
                    "outstanding": s.outstanding,
                    "load": _load(s, view),
                    "failures": s.failures,
                    "healthy": s.failures == 0,
                    "retry_in_s": max(0.0, s.down_until - now) if s.failures else 0.0,
                }
                for i, s in enumerate(self._states)
            ]


def _observe_pick(name: str, index: int) -> None:
    LLM_REPLICA_IN_FLIGHT.labels(name, str(index)).inc()


def _observe_release(name: str, index: int, outcome: Outcome, ejected: bool) -> None:
    LLM_REPLICA_IN_FLIGHT.labels(name, str(index)).dec()
    LLM_REPLICA_ATTEMPTS.labels(name, str(index), outcome).inc()
    if ejected:
        LLM_REPLICA_EJECTIONS.labels(name, str(index)).inc()

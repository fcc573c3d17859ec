"""A content-addressed cache of LLM calls, so a finished run can be scored again, extended or
re-reported without paying for its calls again.

A call's key is the SHA-256 of its model identity (the model's name and, where Parley packaged it, its
weights' sha256), the messages, every sampling parameter (temperature, max_tokens, seed), the response
format asked for, and a sample index: the n-th identical request a process sends gets index n, so n
samples of one prompt at a temperature above 0 stay n different replies, and a rerun asks for the same
n and gets them back in the same order. A hit costs no model call; the reply comes back marked
(``ChatCompletion.from_cache``) and the engine charges it no budget.

``SqliteCallStore`` keeps the replies in one SQLite file, bounded in size: the least recently used are
evicted past the bound. ``CachedChatModel`` wraps any ``ChatModel``; ``only`` turns a miss into
``CallCacheMiss`` (naming the call) instead of a model call, for runs that must replay exactly.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from services.chat_model import ChatCompletion, ChatMessage, ChatModel, LLMError


class CallCacheMiss(LLMError):
    """``only`` mode: a call the cache does not hold; the message names its identity and key."""


class CallStore(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None


class SqliteCallStore:
    """Replies in one SQLite file, at most ``max_bytes`` of them (least recently used evicted)."""

    def __init__(self, path: Path, max_bytes: int = 2 * 2**30) -> None:
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
            "size INTEGER NOT NULL, used REAL NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS calls_used ON calls (used)")

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE calls SET used = ? WHERE key = ?", (time.time(), key))
        loaded: dict[str, Any] = json.loads(row[0])
        return loaded

    def put(self, key: str, value: dict[str, Any]) -> None:
        text = json.dumps(value, sort_keys=True)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (key, value, size, used) VALUES (?, ?, ?, ?)",
                (key, text, len(text), time.time()),
            )
            self._evict()

    def _evict(self) -> None:
        total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM calls").fetchone()[0]
        while total > self.max_bytes:
            row = self._db.execute("SELECT key, size FROM calls ORDER BY used LIMIT 1").fetchone()
            if row is None:
                return
            self._db.execute("DELETE FROM calls WHERE key = ?", (row[0],))
            total -= row[1]

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM calls").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def call_key(
    identity: str,
    messages: Sequence[ChatMessage],
    *,
    temperature: float,
    max_tokens: int | None,
    json_schema: dict[str, Any] | None,
    seed: int | None,
) -> str:
    """The SHA-256 of everything that decides a call's reply but its sample index."""
    canonical = json.dumps(
        {
            "identity": identity,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": temperature,
            "max_tokens": max_tokens,
            "json_schema": json_schema,
            "seed": seed,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class CachedChatModel:
    """A ``ChatModel`` whose calls go through ``store`` first (see the module's docstring)."""

    def __init__(
        self, inner: ChatModel, store: CallStore, identity: str, *, only: bool = False, stats: CacheStats
    ) -> None:
        self.inner = inner
        self.store = store
        self.identity = identity
        self.only = only
        self.stats = stats
        self._seen: Counter[str] = Counter()

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float = 0.5,
        max_tokens: int | None = None,
        json_schema: dict[str, Any] | None = None,
        seed: int | None = None,
        cache_key: str | None = None,
    ) -> ChatCompletion:
        base = call_key(
            self.identity,
            messages,
            temperature=temperature,
            max_tokens=max_tokens,
            json_schema=json_schema,
            seed=seed,
        )
        # Taken before any await: concurrent identical calls get distinct indices.
        index = self._seen[base]
        self._seen[base] += 1
        key = f"{base}-{index}"
        # In the loop, not a thread: a lookup takes well under a millisecond (bench.call_cache).
        stored = self.store.get(key)
        if stored is not None:
            self.stats.hits += 1
            return replace(ChatCompletion(**stored), from_cache=True)
        self.stats.misses += 1
        if self.only:
            raise CallCacheMiss(
                f"the call cache holds no reply for this call ({self.identity}, sample {index}, key "
                f"{key[:16]}…) and --cache-only forbids calling the model",
                url=self.inner.endpoint,
            )
        completion = await self.inner.complete(
            messages,
            temperature=temperature,
            max_tokens=max_tokens,
            json_schema=json_schema,
            seed=seed,
            cache_key=cache_key,
        )
        value = {k: v for k, v in asdict(completion).items() if k not in ("late_attempts", "from_cache")}
        self.store.put(key, value)
        return completion


class CachedRoleModels:
    """Role models whose every model goes through the cache; one wrapper per model, so sample indices
    count across the whole run. ``identity_of`` names a model (its name and weights' sha256)."""

    def __init__(
        self,
        base: Any,
        store: CallStore,
        *,
        only: bool = False,
        identity_of: Any = None,
    ) -> None:
        self.base = base
        self.store = store
        self.only = only
        self.stats = CacheStats()
        self._identity_of = identity_of or (lambda m: m.model)
        self._wrapped: dict[int, CachedChatModel] = {}

    def _wrap(self, model: ChatModel) -> CachedChatModel:
        wrapped = self._wrapped.get(id(model))
        if wrapped is None:
            wrapped = self._wrapped[id(model)] = CachedChatModel(
                model, self.store, self._identity_of(model), only=self.only, stats=self.stats
            )
        return wrapped

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        return self._wrap(self.base.for_role(role, agent))

    def agent_client(self, role: str, **where: Any) -> ChatModel:
        return self._wrap(self.base.agent_client(role, **where))

    def fallback_for(self, role: str) -> ChatModel | None:
        fallback_for = getattr(self.base, "fallback_for", None)
        model = fallback_for(role) if fallback_for is not None else None
        return self._wrap(model) if model is not None else None

    def __getattr__(self, name: str) -> Any:
        # endpoint_names, aclose: the base's.
        return getattr(self.base, name)

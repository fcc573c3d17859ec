"""A content-addressed cache of LLM calls and retrievals, so a finished run can be scored again,
extended or re-reported without paying for its calls again.

A call's key is the SHA-256 of its model identity (the model's name and, where Parley packaged it, its
weights' sha256), the messages, every sampling parameter (temperature, max_tokens, seed), the response
format asked for, who asks (the role and the agent), and a sample index: the n-th identical request
one caller sends gets index n, so n samples of one prompt at a temperature above 0 stay n different
replies, and a rerun asks for the same n and gets them back in the same order (two agents sending the
same prompt at once each get their own, whichever is sent first). A hit costs no model call; the reply
comes back marked (``ChatCompletion.from_cache``) and the engine charges it no budget.

``SqliteCallStore`` keeps the replies in one SQLite file, bounded in size: the least recently used are
evicted past the bound (``parley eval``). ``RedisCallStore`` keeps them in Redis, bounded in entries
the same way, for the service's workers (off unless the operator turns it on). ``CachedChatModel``
wraps any ``ChatModel``; ``only`` turns a miss into ``CallCacheMiss`` (naming the call) instead of a
model call, for runs that must replay exactly. ``CachedPoolBuilder`` does for retrievals what
``CachedChatModel`` does for calls: a pool is keyed by the index's identity, the question, the search
text and the pool sizes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, Unpack

from services.chat_model import ChatCompletion, ChatMessage, ChatModel, CompletionOptions, LLMError


class CallCacheMiss(LLMError):
    """``only`` mode: a call the cache does not hold; the message names its identity and key."""


class CallStore(Protocol):
    """Where cached replies live: a SQLite file (the CLI) or Redis (the service). A store that cannot
    be reached answers as a miss and keeps nothing: the cache never fails a call."""

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, value: dict[str, Any]) -> None: ...


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

    async def get(self, key: str) -> dict[str, Any] | None:
        # In the loop, not a thread: a lookup takes well under a millisecond (bench.call_cache).
        with self._lock:
            row = self._db.execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE calls SET used = ? WHERE key = ?", (time.time(), key))
        loaded: dict[str, Any] = json.loads(row[0])
        return loaded

    async def put(self, key: str, value: dict[str, Any]) -> None:
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
    caller: str = "",
) -> str:
    """The SHA-256 of everything that decides a call's reply but its sample index. ``caller`` (the
    role and agent asking) keeps samples apart that identical prompts from two agents would share."""
    canonical = json.dumps(
        {
            "identity": identity,
            "caller": caller,
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


# eq=False: each instance is its own (one caller's calls, one server), compared and hashed by identity
@dataclass(eq=False)
class CachedChatModel:
    """A ``ChatModel`` whose calls go through ``store`` first (see the module's docstring)."""

    inner: ChatModel
    store: CallStore
    identity: str
    _: KW_ONLY
    stats: CacheStats
    only: bool = False
    # Who asks (role and agent): sample indices count per caller, so two agents sending the same
    # prompt at once get their own samples whichever call is sent first; one caller's calls are
    # sequential, so a rerun numbers them alike.
    caller: str = ""
    # Calls seen per key so far: the next one's sample index (shared by a caller's wrappers).
    seen: Counter[str] = field(default_factory=Counter)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def endpoint(self) -> str:
        return self.inner.endpoint

    async def complete(
        self, messages: Sequence[ChatMessage], **options: Unpack[CompletionOptions]
    ) -> ChatCompletion:
        # The key holds every sampling option, at the protocol's defaults when the caller left it out;
        # cache_key only names a prompt family for the server's KV cache and changes no reply.
        base = call_key(
            self.identity,
            messages,
            temperature=options.get("temperature", 0.5),
            max_tokens=options.get("max_tokens"),
            json_schema=options.get("json_schema"),
            seed=options.get("seed"),
            caller=self.caller,
        )
        # Taken before any await: concurrent identical calls get distinct indices.
        index = self.seen[base]
        self.seen[base] += 1
        key = f"{base}-{index}"
        stored = await self.store.get(key)
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
        completion = await self.inner.complete(messages, **options)
        value = {k: v for k, v in asdict(completion).items() if k not in ("late_attempts", "from_cache")}
        await self.store.put(key, value)
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
        self._wrapped: dict[tuple[int, str], CachedChatModel] = {}
        self._seen: dict[str, Counter[str]] = {}

    def _wrap(self, model: ChatModel, caller: str) -> CachedChatModel:
        wrapped = self._wrapped.get((id(model), caller))
        if wrapped is None:
            wrapped = self._wrapped[(id(model), caller)] = CachedChatModel(
                model,
                self.store,
                self._identity_of(model),
                only=self.only,
                stats=self.stats,
                caller=caller,
                seen=self._seen.setdefault(caller, Counter()),
            )
        return wrapped

    def restart_samples(self) -> None:
        """Number samples from 0 again: a new run begins (``parley eval`` calls this per evaluation,
        so the cells of a study that ask the same call get the same reply, as separate runs would)."""
        for seen in self._seen.values():
            seen.clear()

    def for_role(self, role: str, agent: int | None = None) -> ChatModel:
        return self._wrap(self.base.for_role(role, agent), f"{role}:{agent}")

    def agent_client(self, role: str, **where: Any) -> ChatModel:
        caller = f"{role}:" + ",".join(f"{k}={v}" for k, v in sorted(where.items()))
        return self._wrap(self.base.agent_client(role, **where), caller)

    def fallback_for(self, role: str) -> ChatModel | None:
        fallback_for = getattr(self.base, "fallback_for", None)
        model = fallback_for(role) if fallback_for is not None else None
        return self._wrap(model, f"fallback:{role}") if model is not None else None

    def __getattr__(self, name: str) -> Any:
        # endpoint_names, aclose: the base's.
        return getattr(self.base, name)


class RedisCallStore:
    """Replies in Redis under ``prefix``, at most ``max_entries`` of them (the least recently used are
    evicted), each for at most ``ttl_s``. A Redis error is a miss (``get``) or nothing kept (``put``):
    a worker whose cache is unreachable calls the model, as without a cache."""

    def __init__(self, client: Any, *, prefix: str, max_entries: int, ttl_s: int) -> None:
        self.client = client
        self.prefix = prefix
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.errors = 0

    @property
    def _order(self) -> str:
        return f"{self.prefix}calls:order"

    def _key(self, key: str) -> str:
        return f"{self.prefix}calls:{key}"

    async def get(self, key: str) -> dict[str, Any] | None:
        import redis.exceptions  # lazy: only the service's store needs redis; parley eval does not

        try:
            raw = await self.client.get(self._key(key))
            if raw is None:
                return None
            await self.client.zadd(self._order, {key: time.time()})
        except (redis.exceptions.RedisError, OSError):
            self.errors += 1
            return None
        loaded: dict[str, Any] = json.loads(raw)
        return loaded

    async def put(self, key: str, value: dict[str, Any]) -> None:
        import redis.exceptions  # lazy: as in ``get``

        text = json.dumps(value, sort_keys=True)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.set(self._key(key), text, ex=self.ttl_s)
                pipe.zadd(self._order, {key: time.time()})
                pipe.zcard(self._order)
                *_, count = await pipe.execute()
            if count > self.max_entries:
                evicted = await self.client.zpopmin(self._order, count - self.max_entries)
                if evicted:
                    await self.client.delete(
                        *(self._key(k if isinstance(k, str) else k.decode()) for k, _ in evicted)
                    )
        except (redis.exceptions.RedisError, OSError):
            self.errors += 1


def pool_key(identity: str, question: str, k_wiki: int, k_web: int, search_text: str | None) -> str:
    """The SHA-256 of what decides a pool: the index's identity, the question, the search text, the sizes."""
    canonical = json.dumps(
        {"identity": identity, "question": question, "k_wiki": k_wiki, "k_web": k_web, "search": search_text},
        sort_keys=True,
        ensure_ascii=False,
    )
    return "pool-" + hashlib.sha256(canonical.encode()).hexdigest()


class CachedPoolBuilder:
    """A ``PoolBuilder`` whose pools go through ``store`` first, keyed by ``pool_key``. Retrieval is
    deterministic for one index, so no sample index: the same search always gives the same pool."""

    def __init__(self, inner: Any, store: CallStore, identity: str, stats: CacheStats | None = None) -> None:
        self.inner = inner
        self.store = store
        self.identity = identity
        self.stats = stats or CacheStats()

    async def build_pool(
        self, question: str, k_wiki: int = 5, k_web: int = 5, *, search_text: str | None = None
    ) -> Any:
        from services.knowledge import KnowledgePool  # lazy: keeps this module's imports light

        key = pool_key(self.identity, question, k_wiki, k_web, search_text)
        stored = await self.store.get(key)
        if stored is not None:
            self.stats.hits += 1
            return KnowledgePool.model_validate(stored)
        self.stats.misses += 1
        pool = await self.inner.build_pool(question, k_wiki, k_web, search_text=search_text)
        await self.store.put(key, pool.model_dump(mode="json"))
        return pool

    def __getattr__(self, name: str) -> Any:
        # aclose and the rest: the inner builder's.
        return getattr(self.inner, name)

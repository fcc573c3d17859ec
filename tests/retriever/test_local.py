"""The in-process PoolBuilder used by ``parley ask`` without a retriever URL."""

from __future__ import annotations

import pytest

from retriever.local import LocalPoolBuilder, ensure_index
from retriever.settings import RetrieverSettings
from retriever.store_port import StoreLocked
from services.knowledge import PoolBuilder

pytestmark = [pytest.mark.integration]


async def test_local_builder_as_ask_uses_it(index_copy: RetrieverSettings) -> None:
    ensure_index(index_copy, progress=False)  # built already: a no-op
    builder = LocalPoolBuilder.open(index_copy)
    pb: PoolBuilder = builder  # satisfies the protocol the engine expects
    try:
        pool = await pb.build_pool("who painted the mona lisa", k_wiki=3, k_web=2)
        assert pool.items[0].title == "Mona Lisa" and len(pool.items) == 3
        assert any("Wikipedia-only" in w for w in pool.warnings)
        # The embedded store allows one client per folder: a second open is refused clearly.
        with pytest.raises(StoreLocked, match="in use by another process"):
            LocalPoolBuilder.open(index_copy)
    finally:
        builder.close()  # synchronous close inside a running loop, as parley ask does
    again = LocalPoolBuilder.open(index_copy)  # the folder lock was released
    try:
        cached = await again.build_pool("Who painted the Mona Lisa?", k_wiki=3, k_web=2)
        assert cached.cached and cached.pool_id == pool.pool_id  # the cache persists on disk
    finally:
        await again.aclose()

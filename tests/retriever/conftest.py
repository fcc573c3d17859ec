from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from retriever.embedder import Embedder
from retriever.settings import RetrieverSettings
from tests.retriever.support import build_slice_index, copy_index, slice_settings


@pytest.fixture(scope="session")
def built_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense + BM25 index over a slice (28 articles) of the real bundled corpus, built once per session."""
    data_dir = tmp_path_factory.mktemp("slice") / "index"
    build_slice_index(data_dir)
    return data_dir


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """One loaded encoder (the default one) shared by in-process tests."""
    from retriever.encoders import make_embedder

    emb = make_embedder(RetrieverSettings(), threads=1)
    _ = emb.dim  # loads it
    return emb


@pytest.fixture
def index_copy(built_index: Path, tmp_path: Path) -> RetrieverSettings:
    """Settings pointing at a private copy of the slice index (tests mutate pools and caches)."""
    return slice_settings(copy_index(built_index, tmp_path / "index"))


@pytest.fixture
async def runtime(index_copy: RetrieverSettings, embedder: Embedder) -> AsyncIterator[object]:
    from retriever.runtime import RetrieverRuntime

    rt = RetrieverRuntime.open(index_copy, embedder=embedder)
    try:
        yield rt
    finally:
        await rt.aclose()


@pytest.fixture
def empty_settings(tmp_path: Path) -> Iterator[RetrieverSettings]:
    yield slice_settings(tmp_path / "empty")

"""``parley index build|stats`` through the typer app, and web provider configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from retriever.cli import index_app
from retriever.passage_store import EdgePassageStore, StoreLayout
from retriever.runtime import ConfigError, make_web_search
from retriever.settings import RetrieverSettings
from retriever.websearch import BraveSearch, SearxngSearch, SerperSearch

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_build_jsonl_then_stats(tmp_path: Path) -> None:
    corpus = tmp_path / "mini.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "a", "contents": "Quuxar\nQuuxar is a fictional gas giant with nine moons."},
                {"id": "b", "contents": "Zorblax\nZorblax is the largest moon of Quuxar."},
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    data = tmp_path / "index"
    runner = CliRunner()
    res = runner.invoke(index_app, ["build", "--jsonl", str(corpus), "--data-dir", str(data)])
    assert res.exit_code == 0, res.output
    assert "indexed 2 passages of 'mini'" in res.output and "BM25 holds 2 passages" in res.output
    # Same corpus again: stable ids, nothing duplicated.
    assert runner.invoke(index_app, ["build", "--jsonl", str(corpus), "--data-dir", str(data)]).exit_code == 0
    st = runner.invoke(index_app, ["stats", "--json", "--data-dir", str(data)])
    assert st.exit_code == 0, st.output
    stats = json.loads(st.output)
    assert stats["passages"] == 2 and stats["bm25_docs"] == 2 and stats["vector_size"] == 384
    assert stats["corpora"]["mini"]["passages"] == 2

    # While another process (here: another opener) holds the embedded passage store, the CLI says so.
    holder = EdgePassageStore(RetrieverSettings(data_dir=data).edge_path, StoreLayout())
    try:
        locked = runner.invoke(index_app, ["stats", "--data-dir", str(data)])
        assert locked.exit_code == 2 and "in use by another process" in locked.output
    finally:
        holder.close()


def test_build_rejects_two_sources(tmp_path: Path) -> None:
    res = CliRunner().invoke(index_app, ["build", "--jsonl", "a.jsonl", "--dpr-tsv", "b.tsv"])
    assert res.exit_code != 0


def test_web_provider_configuration() -> None:
    assert make_web_search(RetrieverSettings(web_provider="none")) is None
    assert isinstance(
        make_web_search(RetrieverSettings(web_provider="serper", serper_api_key=SecretStr("k"))), SerperSearch
    )
    assert isinstance(
        make_web_search(RetrieverSettings(web_provider="brave", brave_api_key=SecretStr("k"))), BraveSearch
    )
    assert isinstance(
        make_web_search(RetrieverSettings(web_provider="searxng", searxng_url="http://searxng:8080")),
        SearxngSearch,
    )
    for provider in ("serper", "brave", "searxng"):
        with pytest.raises(ConfigError, match="PARLEY_RETRIEVER_"):
            make_web_search(RetrieverSettings(web_provider=provider))

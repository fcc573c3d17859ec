"""The final-step replay against real eval folders (scripted LLM server): what it re-derives, and
that it refuses to re-derive a debate whose earlier rounds would have gone differently."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.final_step_replay import replay
from evaluation.harness import EvalRequest, evaluate
from tests.evaluation.conftest import FixedPools, models_for
from tests.support.scripted_llm import ScriptedLLM, request_text

pytestmark = pytest.mark.integration


def edit_jsonl(path: Path, item_id: str, edit: Callable[[dict[str, Any]], None]) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        if row["id"] == item_id:
            edit(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def as_if_refused(result: dict[str, Any], role: str, agent: int | None = 0) -> None:
    """Make a recorded reply look as an older parser left it: no answer, a parse error."""
    for rec in result["transcript"]:
        if rec["role"] == role and rec["agent"] == agent:
            rec["answer"], rec["parse_error"] = None, "refused by an older parser"


async def run_eval(scripted: ScriptedLLM, dataset: Path, out: Path, rounds: int) -> None:
    await evaluate(
        EvalRequest(
            dataset=dataset,
            out=out,
            protocols=["madke", "single"],
            prompt_styles=["robust"],
            base_config={"rounds": rounds},
            limit=2,
            progress=False,
            plots=False,
            bootstrap_samples=100,
        ),
        models=models_for(scripted.base_url),
        pool_builder=FixedPools(),
    )


async def test_replay_rederives_final_answers_and_asks_the_summarizer(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "one-round"
    await run_eval(scripted, nq_dataset, out, rounds=1)
    # q1: a debater's recorded reply now names another city, so the replay must ask the summarizer.
    lyon = '{"reason": "r", "answer": "Lyon"}'

    def second_says_lyon(row: dict[str, Any]) -> None:
        next(r for r in row["result"]["transcript"] if r["role"] == "debater" and r["agent"] == 1)["text"] = (
            lyon
        )

    edit_jsonl(out / "transcripts" / "madke-robust.jsonl", "q1", second_says_lyon)
    # q2 and single's q1: recorded as refused by an older parser; the current one accepts them.
    edit_jsonl(
        out / "transcripts" / "madke-robust.jsonl", "q2", lambda row: as_if_refused(row["result"], "debater")
    )
    edit_jsonl(out / "results" / "madke-robust.jsonl", "q2", lambda row: row.update(answer=None))
    edit_jsonl(
        out / "transcripts" / "single-robust.jsonl", "q1", lambda row: as_if_refused(row["result"], "answer")
    )
    edit_jsonl(out / "results" / "single-robust.jsonl", "q1", lambda row: row.update(answer=None))
    summaries_before = sum("Debaters' final answers" in request_text(b) for b in scripted.requests)

    madke, single = await replay(out, ["madke-robust", "single-robust"], models_for(scripted.base_url))

    assert (
        sum("Debaters' final answers" in request_text(b) for b in scripted.requests) == summaries_before + 1
    )
    assert (madke.items, madke.replayed, madke.diverging) == (2, 2, 0)
    assert madke.errors_recorded["debater"].errors == 1 and madke.errors_replay["debater"].errors == 0
    assert madke.errors_replay["summarizer"].records == 1 and madke.errors_replay["summarizer"].errors == 0
    assert (madke.summarizer_role.records, madke.summarizer_role.errors) == (1, 0)
    assert [(c["id"], c["recorded"], c["replay"]) for c in madke.changes] == [("q2", None, "Shakespeare")]
    assert madke.recorded["em"] == 1.0 and madke.replay["em"] == 2.0
    assert [(c["id"], c["replay"]) for c in single.changes] == [("q1", "Paris")]
    assert single.errors_recorded["answer"].errors == 1 and single.errors_replay["answer"].errors == 0


async def test_a_debate_that_would_have_gone_differently_is_kept_as_recorded(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "three-rounds"
    await run_eval(scripted, nq_dataset, out, rounds=3)
    # q1 ended on consensus in round 1 of 3. Had the recorded refusal stood, the debate would have
    # continued; the current parser accepts the reply, so no replay can say what the debate became.
    edit_jsonl(
        out / "transcripts" / "madke-robust.jsonl", "q1", lambda row: as_if_refused(row["result"], "debater")
    )
    edit_jsonl(out / "results" / "madke-robust.jsonl", "q1", lambda row: row.update(answer="Lyon"))

    (madke,) = await replay(out, ["madke-robust"], None)

    assert (madke.replayed, madke.diverging, madke.answers_changed) == (1, 1, 0)
    assert madke.diverging_ids == ["q1"]
    assert madke.recorded == madke.replay  # the diverging item keeps its recorded answer ("Lyon")

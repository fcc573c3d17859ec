"""The LLM judge (MADKE Prompt C.1) on its own scripted endpoint, alone and inside an evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluation.harness import EvalRequest, evaluate
from evaluation.judge import LLMJudge, judge_messages, parse_judge_verdict
from services.llm.client import OpenAIChatClient, RetryPolicy
from tests.evaluation.conftest import models_for
from tests.support.scripted_llm import ScriptedLLM, request_text


def judge_reply(body: dict[str, Any]) -> str:
    """Grades like a lenient judge: the reference's last word in the evaluation answer -> [True]."""
    text = request_text(body)
    answer = text.split("Evaluation answer: ")[-1].split("\n")[0]
    refs = text.split("Reference answers: ")[-1].split("\n")[0]
    if answer.strip() == "3":
        return "I cannot decide."  # unparseable on purpose
    ok = any(r.split()[-1].lower() in answer.lower() for r in refs.split("; "))
    return f"Let's see. The answer {'matches' if ok else 'does not match'}. [{'True' if ok else 'False'}]"


@pytest.mark.unit
def test_prompt_c1_and_parsing() -> None:
    msgs = judge_messages("who wrote hamlet", ["William Shakespeare", "Shakespeare"], "[Shakespeare]")
    assert msgs[0]["content"].startswith("As a judge agent, your primary responsibility is to impartially")
    user = msgs[1]["content"]
    assert "Return [True] if the answer to be evaluated is the correct answer" in user
    assert (
        "(END OF EXAMPLES)\n\nQuestion: who wrote hamlet\nReference answers: William Shakespeare; Shakespeare"
        in user
    )
    assert user.endswith("Evaluation answer: [Shakespeare]\nAnswer: Let's think step by step!")
    assert parse_judge_verdict("maybe [False] ... no wait, [True]") == (True, None)
    assert parse_judge_verdict("[ false ]") == (False, None)
    verdict, error = parse_judge_verdict("It is correct.")
    assert verdict is None and error is not None and "[True]/[False]" in error


@pytest.mark.integration
async def test_judge_on_its_own_endpoint() -> None:
    with ScriptedLLM(model="judge-model") as server:
        server.on(lambda body: True, judge_reply)
        async with OpenAIChatClient(
            server.base_url, "judge-model", retry=RetryPolicy(max_attempts=1)
        ) as client:
            judge = LLMJudge(client)
            yes = await judge.grade("who wrote hamlet", ["William Shakespeare"], "Shakespeare")
            no = await judge.grade("largest planet", ["Jupiter"], "Saturn")
            odd = await judge.grade("who painted it", ["Leonardo da Vinci"], "3")
            none = await judge.grade("q", ["x"], None)
        assert server.requests[0]["temperature"] == 0.0
    assert (yes.verdict, no.verdict) == (True, False)
    assert yes.model == "judge-model" and yes.raw.endswith("[True]")
    assert odd.verdict is None and odd.error and not odd.call_failed
    assert none.verdict is False and len(server.requests) == 3  # nothing to grade: no call


@pytest.mark.integration
async def test_evaluation_graded_by_judge(scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "judged"
    with ScriptedLLM(model="judge-model") as server:
        server.on(lambda body: True, judge_reply)
        async with OpenAIChatClient(
            server.base_url, "judge-model", retry=RetryPolicy(max_attempts=1)
        ) as client:
            outcome = await evaluate(
                EvalRequest(
                    dataset=nq_dataset,
                    out=out,
                    protocols=["single"],
                    primary="judge",
                    progress=False,
                    plots=False,
                ),
                models=models_for(scripted.base_url),
                judge=LLMJudge(client),
            )
    # The debate server never saw a grading prompt: the judge has its own endpoint.
    assert not any("Evaluation answer:" in request_text(b) for b in scripted.requests)
    run = outcome.report["runs"][0]
    assert run["judge_graded"] == 4 and run["judge_unparseable"] == 1
    assert run["judge_accuracy"] == pytest.approx(
        0.5
    )  # Paris, Shakespeare right; Saturn wrong; "3" unparseable
    assert run["accuracy"] == pytest.approx(0.5)
    rows = {
        json.loads(x)["id"]: json.loads(x)
        for x in (out / "results" / "single.jsonl").read_text().splitlines()
    }
    assert rows["q4"]["judge"]["verdict"] is None and "[True]/[False]" in rows["q4"]["judge"]["error"]
    assert rows["q2"]["judge"]["verdict"] is True and rows["q2"]["scores"]["correct"] == 1.0


@pytest.mark.integration
async def test_judge_added_later_grades_existing_results(
    scripted: ScriptedLLM, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "later"
    request = EvalRequest(dataset=nq_dataset, out=out, protocols=["single"], progress=False, plots=False)
    await evaluate(request, models=models_for(scripted.base_url))
    debate_calls = len(scripted.requests)
    with ScriptedLLM(model="judge-model") as server:
        server.on(lambda body: True, judge_reply)
        async with OpenAIChatClient(
            server.base_url, "judge-model", retry=RetryPolicy(max_attempts=1)
        ) as client:
            outcome = await evaluate(request, models=models_for(scripted.base_url), judge=LLMJudge(client))
        graded = len(server.requests)
    assert len(scripted.requests) == debate_calls  # nothing was debated again
    assert graded == 4
    run = outcome.report["runs"][0]
    assert run["judge_graded"] == 4 and run["judge_accuracy"] == pytest.approx(0.5)
    assert run["accuracy"] == pytest.approx(0.5)  # primary stays EM

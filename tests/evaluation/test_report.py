"""The report's arithmetic on hand-made transcripts: which passages hold the answer, and how often a
selection step let one through."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.result import DebateResult, TranscriptRecord
from evaluation.report import questions_per_hour
from evaluation.run_diagnostics import answer_passages, selection_hits
from evaluation.store import Invocation, Workspace
from services.knowledge import KnowledgeItem, KnowledgePool
from tests.support.results import debate_result

pytestmark = pytest.mark.unit


def pool(*texts: str) -> KnowledgePool:
    items = [KnowledgeItem(n=i, source="wikipedia", title=f"T{i}", text=t) for i, t in enumerate(texts, 1)]
    return KnowledgePool(pool_id="p", question="q", items=items)


def debate(knowledge: KnowledgePool, *selections: list[int] | None) -> DebateResult:
    steps = [TranscriptRecord(round=1, role="select", agent=a, selected=s) for a, s in enumerate(selections)]
    steps.append(TranscriptRecord(round=1, role="debater", agent=0, knowledge=[1], answer="Paris"))
    return debate_result(knowledge.items, steps)


def test_answer_passages_match_whole_words_of_any_alias() -> None:
    p = pool("Paris is the capital.", "A Parisian café.", "The City of Light, as some say.", "Lyon.")
    assert answer_passages(p, ["Paris"]) == {1}
    assert answer_passages(p, ["paris", "city of light"]) == {1, 3}
    assert answer_passages(p, []) == set()


def test_selection_hits_count_steps_whose_pool_holds_the_answer() -> None:
    """q1: the answer is in passage 2; one agent picks [2, 3], the other [1], a third nothing (None).
    q2: no passage holds it, so its steps do not count. One hit in three steps."""
    holding = pool("Lyon.", "Paris is the capital.", "Lille.")
    lacking = pool("Lyon.", "Lille.")
    transcripts = {"q1": debate(holding, [2, 3], [1], None), "q2": debate(lacking, [1], [2])}
    gold = {"q1": ["Paris"], "q2": ["Paris"]}
    assert selection_hits(transcripts, gold) == {"steps": 3, "share": pytest.approx(1 / 3)}
    assert selection_hits({"q2": transcripts["q2"]}, gold) == {"steps": 0, "share": None}


def test_questions_per_hour_is_answered_questions_over_wall_time_across_invocations() -> None:
    """Two invocations (one interrupted): 30 answered in 1,800 s of wall time is 60 an hour, whatever
    the per-question latencies were; failures are not answers."""
    runs = [
        Invocation(run="madke", started_at="t", wall_s=600, ok=10, failed=2, concurrency=2),
        Invocation(run="madke", started_at="t", wall_s=1200, ok=20, failed=0, concurrency=2),
    ]
    assert questions_per_hour(runs) == pytest.approx(60.0)
    assert questions_per_hour([]) is None
    assert (
        questions_per_hour([Invocation(run="x", started_at="t", wall_s=5, ok=0, failed=3, concurrency=1)])
        is None
    )


def test_invocations_are_read_per_run_past_a_torn_line(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.log_invocation(Invocation(run="rag", started_at="t", wall_s=10, ok=5, failed=0, concurrency=1))
    ws.log_invocation(Invocation(run="madke", started_at="t", wall_s=90, ok=3, failed=0, concurrency=2))
    with ws.invocations_path.open("a") as f:
        f.write('{"run": "rag", "wall_s": -1}\n{"run": "rag", "started')
    assert [i.ok for i in ws.load_invocations("rag")] == [5]
    assert [i.wall_s for i in ws.load_invocations("madke")] == [90]

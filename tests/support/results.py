"""A ``DebateResult`` built by hand, for tests of what reads one (reports, citations, studies)."""

from __future__ import annotations

from collections.abc import Sequence

from engine.result import DebateResult, TranscriptRecord, Usage
from services.knowledge import KnowledgeItem, KnowledgePool


def debate_result(
    items: Sequence[KnowledgeItem],
    transcript: Sequence[TranscriptRecord] = (),
    *,
    protocol: str = "madke",
    question: str = "q?",
    answer: str = "Paris",
    answer_source: str = "summarizer",
    usage: Usage | None = None,
) -> DebateResult:
    """One finished round on a pool of ``items``, with ``transcript`` as its calls."""
    return DebateResult(
        question=question,
        protocol=protocol,
        answer=answer,
        answer_source=answer_source,
        rounds=1,
        consensus=True,
        pool=KnowledgePool(pool_id="p", question=question, items=list(items)),
        transcript=list(transcript),
        usage=usage or Usage(),
        usage_by_role={},
    )

"""What the debaters' searches during a debate did to the pool (``DebateConfig.debate_search``): how
often the first pool and the final pool held a gold answer, what the searches added, where the new
items came from, who selected them and what the searching cost. Read from the stored transcripts:
the final pool is the result's, its first items are those no search added."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from engine.registry import QUERY_ROLE
from engine.result import DebateResult
from evaluation.metrics import paired_bootstrap
from evaluation.run_diagnostics import answer_passages
from services.knowledge import KnowledgePool


def _first(pool: KnowledgePool) -> KnowledgePool:
    return pool.model_copy(update={"items": pool.first_items})


def pool_growth(
    transcripts: Mapping[str, DebateResult], gold: Mapping[str, Sequence[str]]
) -> dict[str, Any] | None:
    """The run's searches in figures; None when none of its debates was configured to search."""
    searching = {
        item_id: res
        for item_id, res in transcripts.items()
        if (res.config.get("debate_search") or {}).get("per_agent", 0) > 0
    }
    if not searching:
        return None
    n = len(searching)
    first_holds: list[float] = []
    final_holds: list[float] = []
    written = added = selected_added = selected_by_other = 0
    query_tokens = 0
    stopped = 0
    sources: Counter[str] = Counter()
    for item_id, res in searching.items():
        answers = list(gold.get(item_id, []))
        first_holds.append(float(bool(answer_passages(_first(res.pool), answers))))
        final_holds.append(float(bool(answer_passages(res.pool, answers))))
        new = {it.n: it for it in res.pool.items if it.found_by is not None}
        added += len(new)
        sources.update(it.source for it in new.values())
        chosen: set[int] = set()
        for rec in res.transcript:
            if rec.role == QUERY_ROLE:
                written += bool(rec.extra.get("query"))
                query_tokens += rec.prompt_tokens + rec.completion_tokens
            elif rec.role == "select" and rec.selected:
                for num in rec.selected:
                    if num in new:
                        chosen.add(num)
                        finder = new[num].found_by
                        selected_by_other += finder is not None and rec.agent != finder.agent
        selected_added += len(chosen)
        stopped += any("retriever could not be reached" in w for w in res.pool.warnings)
    # The decision rule's bootstrap (10,000 paired resamples, seed 0): the same question's two pools.
    grew = paired_bootstrap(first_holds, final_holds)
    return {
        "debates": n,
        "searches_per_q": written / n,
        "items_added_per_q": added / n,
        "answer_in_first_pool": sum(first_holds) / n,
        "answer_in_final_pool": sum(final_holds) / n,
        "final_minus_first": {"diff": grew.diff, "low": grew.low, "high": grew.high, "level": grew.level},
        "added_items_selected": selected_added / added if added else None,
        "selections_of_added_by_other_agents": selected_by_other,
        "added_by_source": dict(sorted(sources.items())),
        "query_tokens_per_q": query_tokens / n,
        "debates_with_retriever_outage": stopped,
    }

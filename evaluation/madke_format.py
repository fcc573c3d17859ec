"""MADKE's evaluation files (FutureForMe/MADKE, ``data/<dataset>/<split>_all_retrieval_500.json``):
the question, its answer aliases and the knowledge pool published with it."""

from __future__ import annotations

from typing import Any

from evaluation.items import FEVER_LABELS, Item, LineError, answer_aliases, text_field
from evaluation.question_formats import choices_in_question, load_fever, load_mc
from services.knowledge import GivenKnowledge, KnowledgePool, KnowledgeSource, pool_from_items

# Pool sources of a MADKE record: the field, the Parley source it fills. MMLU-Med replaced the web
# search by medical textbooks (paper §5.5); those fill the second (web) slot, as in the reference code.
POOL_FIELDS: tuple[tuple[str, KnowledgeSource], ...] = (
    ("wiki_retrieval", "wikipedia"),
    ("google_retrieval", "web"),
    ("textbooks_retrieval", "web"),
)


def given_knowledge(entry: Any, source: KnowledgeSource) -> GivenKnowledge:
    """One precomputed pool entry: ``contents`` is ``Title\ntext`` (a pyserini document); a web
    snippet may carry its own ``title``/``link``. Text may come out empty; the pool drops it."""
    if isinstance(entry, str):
        entry = {"contents": entry}
    if not isinstance(entry, dict):
        return GivenKnowledge(source=source)
    raw = entry.get("contents", entry.get("text"))
    contents = raw if isinstance(raw, str) else ""
    title, sep, text = contents.partition("\n")
    if not sep:  # no title line: the whole contents is the text
        title, text = "", contents
    if isinstance(entry.get("title"), str) and not title:
        title = entry["title"]
    score = entry.get("score")
    url = entry.get("url", entry.get("link"))
    return GivenKnowledge(
        source=source,
        title=title.strip(),
        text=text.strip(),
        url=url if isinstance(url, str) else None,
        score=float(score) if isinstance(score, int | float) and not isinstance(score, bool) else 0.0,
    )


def file_pool(record: dict[str, Any], question: str, item_id: str) -> tuple[KnowledgePool | None, int]:
    """The record's own pool (all entries; runs cut it to k_wiki/k_web) and how many entries had no
    text. None when the record carries no pool fields at all."""
    given: list[GivenKnowledge] = []
    present = False
    for field, source in POOL_FIELDS:
        entries = record.get(field)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise LineError(f"'{field}' must be a list of pool entries")
        present = True
        given.extend(given_knowledge(e, source) for e in entries)
    if not present:
        return None, 0
    return pool_from_items(question, given, pool_id=f"file:{item_id}")


def load_madke(record: dict[str, Any], default_id: str) -> Item:
    """A MADKE record: the question, its ``answer`` aliases and its precomputed pools.

    The kind follows from the answers, as MADKE's files share one layout for every dataset: FEVER
    labels make a FEVER item (the question is the claim), a question with option lines and a letter
    answer an MMLU-Med item, anything else generative QA."""
    question = text_field(record, "question")
    raw = record.get("answer", record.get("answers"))
    item_id = str(record.get("id", default_id))
    aliases = answer_aliases(raw)
    labels = {a.upper().replace("_", " ") for a in aliases}
    if labels <= set(FEVER_LABELS) and len(labels) == 1:
        item = load_fever({"claim": question, "label": labels.pop()}, item_id)
    elif "choices" in record or "options" in record or choices_in_question(question) is not None:
        item = load_mc({**record, "answer": aliases[0]}, item_id)
    else:
        item = Item(id=item_id, question=question, answers=aliases)
    item = item.model_copy(update={"id": item_id})
    pool, dropped = file_pool(record, item.question, item_id)
    meta = {**item.meta, **({"pool_dropped": dropped} if dropped else {})}
    return item.model_copy(update={"pool": pool, "meta": meta})

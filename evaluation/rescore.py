"""Score an evaluation's stored answers again with another primary metric, running no model.

A metric that changes (the strict contains replacing the plain one as the default, say) must not cost
the hours of debate that produced the answers: every ``ok`` result keeps its answer, transcript, tokens
and seconds, and only its ``scores`` are computed again. The LLM judge is not called: ``--primary
judge`` uses the verdicts already stored, and is refused while any generative answer lacks one.
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluation.scoring import PrimaryMetric, score_answer
from evaluation.store import ResultRecord, Workspace, WorkspaceError, now_iso


@dataclass(frozen=True)
class RunRescore:
    """One run's accuracy under the metric it was scored with and under the new one."""

    label: str
    scored: int
    correct_before: float
    correct_after: float
    changed: int  # answers whose credit changed


@dataclass(frozen=True)
class Rescore:
    before: str
    after: str
    runs: tuple[RunRescore, ...]


def _stored_verdict(rec: ResultRecord) -> bool | None:
    if rec.judge is None or rec.judge.call_failed:
        return None
    return rec.judge.verdict


def rescore_workspace(ws: Workspace, primary: PrimaryMetric) -> Rescore:
    """Rewrite every run's results in ``ws`` with ``primary`` and record it in ``eval.json``.

    Nothing is written when any run cannot be scored (a missing judge verdict, items gone), so a
    refused rescore leaves the folder as it was."""
    manifest = ws.load_manifest()
    if manifest is None:
        raise WorkspaceError(f"{ws.root} holds no evaluation (no eval.json)")
    items = {it.id: it for it in ws.load_items()}
    rewritten: dict[str, list[ResultRecord]] = {}
    runs: list[RunRescore] = []
    for spec in manifest.runs:
        records = sorted(ws.load_results(spec.label).values(), key=lambda r: r.index)
        out: list[ResultRecord] = []
        before = after = 0.0
        scored = changed = 0
        for rec in records:
            if rec.status != "ok" or rec.scores is None:
                out.append(rec)
                continue
            item = items.get(rec.id)
            if item is None:
                raise WorkspaceError(
                    f"{ws.root}: result {rec.id!r} of run {spec.label!r} has no item in items.jsonl"
                )
            verdict = _stored_verdict(rec)
            if primary == "judge" and item.kind == "qa" and verdict is None:
                raise WorkspaceError(
                    f"{ws.root}: run {spec.label!r} has answers the LLM judge has not graded "
                    f"({rec.id!r} first); grade them with `parley eval … --judge` before --primary judge"
                )
            scores = score_answer(item, rec.answer, primary=primary, judge=verdict)
            scored += 1
            before += rec.scores.correct
            after += scores.correct
            changed += scores.correct != rec.scores.correct
            out.append(rec.model_copy(update={"scores": scores}))
        rewritten[spec.label] = out
        runs.append(
            RunRescore(
                label=spec.label,
                scored=scored,
                correct_before=before / scored if scored else 0.0,
                correct_after=after / scored if scored else 0.0,
                changed=changed,
            )
        )
    for label, records_out in rewritten.items():
        ws.replace_results(label, records_out)
    ws.save_manifest(manifest.model_copy(update={"primary": primary, "updated_at": now_iso()}))
    return Rescore(before=manifest.primary, after=primary, runs=tuple(runs))

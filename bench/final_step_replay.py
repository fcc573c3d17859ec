"""Final-step replay: what the current parser and summarizer make of recorded debates.

A run's final answer is decided by its last step alone: the one answer call of ``single``/``rag``, or
MADKE's final-round answers and then, when they differ, the summarizer (temperature 0). A change to
the answer parser or to the summary prompt leaves everything before that step as it was, so replaying
the step on the recorded replies gives the answers the changed code would have given on the same
debates (up to llama.cpp's run-to-run variation at temperature 0), without re-running them (about
45 minutes per 40 MADKE questions on 2 cores).

Every recorded reply is re-parsed with the current parser. A MADKE item is replayed only when the
debate itself would have gone the same way: no reply before the final round parses differently or is
unusable (an unusable reply is quoted differently now), and a final round that ended on consensus
still has agreeing answers. Other items are counted as diverging and kept as recorded. A replayed
item whose final answers differ calls the summarizer through the engine's own ``final_answer`` on the
configured endpoint or the embedded model (``PARLEY_LLM_EMBEDDED_MODEL``).

    PARLEY_LLM_EMBEDDED_MODEL=qwen2.5-coder-1.5b .venv/bin/python -m bench.final_step_replay \\
        reports/styles-1.5b --runs madke-robust,single-robust,rag-robust
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.answers import answers_agree
from engine.config import DebateConfig
from engine.context import DebateContext, RoleModels
from engine.protocols.madke import prompts_for as get_prompts
from engine.protocols.madke.prompts import MadkePrompts as PromptSet
from engine.protocols.madke.runner import final_answer, needs_summary
from engine.result import DebateResult, TranscriptRecord
from evaluation.datasets import Item
from evaluation.run_diagnostics import answer_shares, example_answers, knowledge_label
from evaluation.scoring import Scores, score_answer
from evaluation.store import Workspace
from services.llm import RoleModelsFromSettings

ONE_CALL_PROTOCOLS = ("single", "cot", "rag")


@dataclass
class RoleErrors:
    records: int = 0
    errors: int = 0

    def add(self, error: str | None) -> None:
        self.records += 1
        self.errors += error is not None


@dataclass
class RunReplay:
    label: str
    items: int = 0
    replayed: int = 0
    diverging: int = 0
    answers_changed: int = 0
    recorded: dict[str, float] = field(default_factory=lambda: {"contains": 0.0, "em": 0.0, "f1": 0.0})
    replay: dict[str, float] = field(default_factory=lambda: {"contains": 0.0, "em": 0.0, "f1": 0.0})
    errors_recorded: dict[str, RoleErrors] = field(default_factory=dict)
    errors_replay: dict[str, RoleErrors] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)
    diverging_ids: list[str] = field(default_factory=list)
    # The summarizer as a role: asked on every recorded final round whose answers differ, diverging
    # items included (their final round is what the debaters really said, if not what they would say now).
    summarizer_role: RoleErrors = field(default_factory=RoleErrors)
    # Shares of bare-number, example-copy and placeholder final answers (the report's definitions).
    answers_recorded: dict[str, float | None] = field(default_factory=dict)
    answers_replay: dict[str, float | None] = field(default_factory=dict)

    def count(self, which: dict[str, RoleErrors], role: str, error: str | None) -> None:
        which.setdefault(role, RoleErrors()).add(error)

    def score(self, which: dict[str, float], scores: Scores) -> None:
        which["contains"] += scores.contains
        which["em"] += scores.em
        which["f1"] += scores.f1


def reparse(prompts: PromptSet, rec: TranscriptRecord) -> tuple[str | None, str | None]:
    """The answer and parse error the current parser gives a recorded reply (as ``answer_parser``)."""
    parsed = prompts.parse_answer(rec.text)
    return parsed.answer, parsed.parse_error


def debater_rounds(result: DebateResult) -> list[list[TranscriptRecord]]:
    rounds: dict[int, list[TranscriptRecord]] = {}
    for rec in result.transcript:
        if rec.role == "debater":
            rounds.setdefault(rec.round, []).append(rec)
    return [sorted(rounds[r], key=lambda rec: rec.agent or 0) for r in sorted(rounds)]


async def replay_madke(
    result: DebateResult, prompts: PromptSet, models: RoleModels | None, run: RunReplay
) -> tuple[bool, str | None]:
    """(replayable, the replayed final answer); not replayable when the debate would have gone
    differently with the current code."""
    config = DebateConfig.model_validate(result.config)
    rounds = debater_rounds(result)
    reparsed = [[reparse(prompts, rec) for rec in records] for records in rounds]
    final = rounds[-1]
    new_answers = [answer for answer, _ in reparsed[-1]]
    summary: tuple[str | None, str | None] | None = None
    if needs_summary(prompts, new_answers):
        summary = await summarize_recorded(result, config, prompts, models, final, new_answers)
        run.summarizer_role.add(summary[1])
    for records, parsed in zip(rounds[:-1], reparsed[:-1], strict=True):
        if any(
            answer is None or answer != rec.answer for rec, (answer, _) in zip(records, parsed, strict=True)
        ):
            return False, None
    old_agree = answers_agree([rec.answer for rec in final])
    if result.rounds < config.rounds and answers_agree(new_answers) != old_agree:
        return False, None
    for parsed in reparsed:
        for _, error in parsed:
            run.count(run.errors_replay, "debater", error)
    if summary is None:
        return True, new_answers[0]
    run.count(run.errors_replay, "summarizer", summary[1])
    return True, summary[0]


async def summarize_recorded(
    result: DebateResult,
    config: DebateConfig,
    prompts: PromptSet,
    models: RoleModels | None,
    final: list[TranscriptRecord],
    answers: list[str | None],
) -> tuple[str | None, str | None]:
    """The engine's final step on the recorded final round: (final answer, the summary's parse error)."""
    if models is None:
        raise RuntimeError("this item needs a summarizer call: give an LLM endpoint or embedded model")
    ctx = DebateContext(result.question, result.pool, config, models)
    answer, _ = await final_answer(ctx, prompts, result.rounds, [rec.text for rec in final], answers)
    return answer, ctx.transcript[-1].parse_error


async def replay_run(
    ws: Workspace, label: str, items: dict[str, Item], models: RoleModels | None
) -> RunReplay:
    run = RunReplay(label)
    finals: dict[str, list[str | None]] = {"recorded": [], "replay": []}
    pool_sizes: list[int | None] = []
    style = "paper"
    results = ws.load_results(label)
    transcripts = ws.load_transcripts(label)
    for item_id, record in results.items():
        result = transcripts.get(item_id)
        if record.status != "ok" or result is None:
            continue
        item = items[item_id]
        style = record.prompt_style
        prompts = get_prompts(style)
        run.items += 1
        finals["recorded"].append(record.answer)
        pool_sizes.append(len(result.pool.items) if result.pool.items else None)
        for rec in result.transcript:
            if rec.role in ("debater", "summarizer", "answer"):
                run.count(run.errors_recorded, rec.role, rec.parse_error)
        replayable = True
        if record.protocol in ONE_CALL_PROTOCOLS:
            answer_rec = next(rec for rec in result.transcript if rec.role == "answer")
            new, error = reparse(prompts, answer_rec)
            run.count(run.errors_replay, "answer", error)
        elif record.protocol == "madke":
            replayable, new = await replay_madke(result, prompts, models, run)
        else:
            raise SystemExit(f"{label}: replay covers single, cot, rag and madke, not {record.protocol}")
        old_scores = score_answer(item, record.answer)
        run.score(run.recorded, old_scores)
        if not replayable:
            run.diverging += 1
            run.diverging_ids.append(item_id)
            finals["replay"].append(record.answer)
            run.score(run.replay, old_scores)
            for rec in result.transcript:
                if rec.role in ("debater", "summarizer"):
                    run.count(run.errors_replay, rec.role, rec.parse_error)
            continue
        run.replayed += 1
        finals["replay"].append(new)
        new_scores = score_answer(item, new)
        run.score(run.replay, new_scores)
        if new != record.answer:
            run.answers_changed += 1
            run.changes.append(
                {
                    "id": item_id,
                    "question": record.question,
                    "gold": record.gold,
                    "recorded": record.answer,
                    "replay": new,
                    "contains": [old_scores.contains, new_scores.contains],
                }
            )
    examples = example_answers(style)
    label_pattern = knowledge_label(style)
    run.answers_recorded = answer_shares(finals["recorded"], examples, pool_sizes, label_pattern)
    run.answers_replay = answer_shares(finals["replay"], examples, pool_sizes, label_pattern)
    return run


@contextlib.contextmanager
def role_models(needed: bool) -> Iterator[RoleModelsFromSettings | None]:
    if not needed:
        yield None
        return
    from rich.console import Console

    from inprocess.local_debate import llm_endpoint
    from services.llm import LLMSettings, build_role_models

    settings = LLMSettings()
    with llm_endpoint(settings, Console(stderr=True)) as served:
        yield build_role_models(settings, served=served)


def pct(total: float, n: int) -> str:
    return f"{100 * total / n:.1f}" if n else "–"


def errors_cell(errors: dict[str, RoleErrors]) -> str:
    return ", ".join(f"{role} {e.errors}/{e.records}" for role, e in sorted(errors.items()))


def shares_cell(shares: dict[str, float | None]) -> str:
    return " / ".join(
        "–" if shares.get(k) is None else f"{100 * (shares[k] or 0.0):.1f}"
        for k in ("bare_number", "example_copy", "placeholder")
    )


def markdown(folder: Path, runs: list[RunReplay]) -> str:
    lines = [
        f"# Final-step replay of `{folder}`",
        "",
        "Recorded replies re-parsed, and summaries re-asked, with the current code "
        "(`python -m bench.final_step_replay`). Diverging items would have debated differently "
        "and are kept as recorded.",
        "",
        "| run | items | replayed | diverging | answers changed | contains % (recorded → replay) "
        "| EM % | F1 % | bare-number / example-copy / placeholder % | parse errors recorded "
        "| parse errors replay |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        cells = [
            f"{pct(r.recorded[m], r.items)} → {pct(r.replay[m], r.items)}" for m in ("contains", "em", "f1")
        ]
        shares = f"{shares_cell(r.answers_recorded)} → {shares_cell(r.answers_replay)}"
        lines.append(
            f"| {r.label} | {r.items} | {r.replayed} | {r.diverging} | {r.answers_changed} | "
            f"{' | '.join(cells)} | {shares} | {errors_cell(r.errors_recorded)} | "
            f"{errors_cell(r.errors_replay)} |"
        )
    for r in runs:
        if r.diverging_ids:
            lines.append(f"\n{r.label}: diverging items {', '.join(r.diverging_ids)}")
        if r.summarizer_role.records:
            lines.append(
                f"\n{r.label}: the summarizer asked on every recorded final round whose answers differ "
                f"(diverging items included): {r.summarizer_role.errors}/{r.summarizer_role.records} "
                "unusable replies"
            )
    changes = [(r.label, c) for r in runs for c in r.changes]
    if changes:
        lines += ["", "## Changed answers", "", "| run | item | question | recorded | replay | contains |"]
        lines.append("|---|---|---|---|---|---|")
        for label, c in changes:
            lines.append(
                f"| {label} | {c['id']} | {c['question']} | {c['recorded']} | {c['replay']} | "
                f"{c['contains'][0]:.0f} → {c['contains'][1]:.0f} |"
            )
    return "\n".join(lines) + "\n"


async def replay(folder: Path, labels: list[str], models: RoleModels | None) -> list[RunReplay]:
    ws = Workspace(folder)
    items = {item.id: item for item in ws.load_items()}
    return [await replay_run(ws, label, items, models) for label in labels]


async def replay_and_close(
    folder: Path, labels: list[str], models: RoleModelsFromSettings | None
) -> list[RunReplay]:
    try:
        return await replay(folder, labels, models)
    finally:
        if models is not None:
            await models.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="an eval output folder")
    parser.add_argument("--runs", required=True, help="comma-separated run labels, e.g. madke-robust")
    parser.add_argument("--out", type=Path, help="where replay.md/json go (default FOLDER/replay)")
    args = parser.parse_args()
    labels = [label.strip() for label in args.runs.split(",") if label.strip()]
    needs_llm = any(not label.startswith(ONE_CALL_PROTOCOLS) for label in labels)
    with role_models(needs_llm) as models:
        runs = asyncio.run(replay_and_close(args.folder, labels, models))
    out = args.out or args.folder / "replay"
    out.mkdir(parents=True, exist_ok=True)
    (out / "replay.json").write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    text = markdown(args.folder, runs)
    (out / "replay.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""Does a larger knowledge pool pay end to end? Accuracy and tokens per pool size, per protocol.

Run (from the repository root, after `parley index build`; the embedded default is started by each
evaluation, or point ``PARLEY_LLM_BASE_URL``/``PARLEY_LLM_MODEL`` at a running server):

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.pool_size --dataset data/nq_open_vital_dev.jsonl \\
        --sizes 5,10,15 --protocols rag,madke --limit 200 --out reports/pool-size \\
        --reuse 5=reports/evidence-pinned-slots

Each pool size is an ordinary ``parley eval`` folder, ``OUT/k<size>``, run with ``--set k_wiki=<size>``
(protocol by protocol, smallest size first, so the cheap protocol's whole curve comes before the
expensive one's): an interrupted study resumes where it stopped (run the same command), and any size's
folder reads like every other evaluation. ``--reuse SIZE=FOLDER`` takes one size's runs from an
evaluation that already exists (the evidence suite's, say) instead of running them again; each
protocol's configuration is then taken from that folder's run, so every size differs from it in
``k_wiki`` only. A reused folder is read, never written.

Reported per protocol and size: accuracy (the evaluation's primary metric, ``strict_contains`` by
default) with its 95 % bootstrap CI, the paired difference against the smallest size over the questions
both finished (95 % CI; "may be noise" when it contains 0), tokens, calls and seconds per question and
the mean number of pool items the agents saw, the share of pools that held a gold answer (a
SQuAD-normalised alias occurs in a pool item: what the agents could have found) and the accuracy on
those questions (how well the model reads what it was given). Writes ``pool_size.json``,
``pool_size.md`` and ``pool_size.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.plots import pyplot, save
from bench.harness.retrieval import has_answer
from engine.config import HONOURED, DebateConfig
from evaluation import metrics
from evaluation.report import compare_runs
from evaluation.store import RunSpec, Workspace
from evaluation.suite_report import accuracy_ci, cost_per_question

Runner = Callable[[Sequence[str]], int]


class StudyError(RuntimeError):
    """A plan the study cannot run as asked: a reused folder that does not fit it."""


@dataclass(frozen=True)
class SizeFolder:
    size: int
    folder: Path
    reused: bool


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise StudyError(f"--sizes takes pool sizes like 5,10,15, not {text!r}") from None
    upper = DebateConfig.model_fields["k_wiki"].metadata
    largest = next((m.le for m in upper if hasattr(m, "le")), 50)
    if not sizes or sizes[0] < 1 or sizes[-1] > largest:
        raise StudyError(f"pool sizes must lie in 1..{largest}, got {text!r}")
    return sizes


def parse_reuse(values: Sequence[str], sizes: Sequence[int]) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for value in values:
        size_text, sep, folder = value.partition("=")
        if not sep or not size_text.strip().isdigit() or not folder:
            raise StudyError(f"--reuse takes SIZE=FOLDER, not {value!r}")
        size = int(size_text)
        if size not in sizes:
            raise StudyError(f"--reuse {value}: {size} is not one of the sizes {list(sizes)}")
        if not (Path(folder) / "eval.json").exists():
            raise StudyError(f"--reuse {value}: {folder} holds no evaluation (no eval.json)")
        out[size] = Path(folder)
    return out


def plan(out: Path, sizes: Sequence[int], reuse: dict[int, Path]) -> list[SizeFolder]:
    return [SizeFolder(s, reuse.get(s, out / f"k{s}"), s in reuse) for s in sizes]


def reused_run(folder: SizeFolder, protocol: str, primary: str) -> RunSpec:
    """The run of ``protocol`` in a reused folder, checked to be a run of this pool size and metric."""
    manifest = Workspace(folder.folder).load_manifest()
    assert manifest is not None  # parse_reuse checked eval.json
    if manifest.primary != primary:
        raise StudyError(
            f"{folder.folder} measured {manifest.primary}, this study {primary}: "
            "the accuracies would not compare"
        )
    spec = next((r for r in manifest.runs if r.label == protocol), None)
    if spec is None:
        raise StudyError(
            f"{folder.folder} has no run labelled {protocol!r} to reuse for pool size {folder.size}"
        )
    if spec.config.get("k_wiki") != folder.size:
        raise StudyError(
            f"the {protocol} run in {folder.folder} used k_wiki {spec.config.get('k_wiki')}, "
            f"not {folder.size}"
        )
    return spec


def eval_command(
    *,
    dataset: Path,
    folder: Path,
    protocol: str,
    size: int,
    limit: int,
    primary: str,
    concurrency: int,
    base_config: dict[str, Any] | None,
    progress: bool,
) -> list[str]:
    """The ``parley eval`` command line of one protocol at one pool size."""
    cmd = [sys.executable, "-m", "parley_cli", "eval", "--dataset", str(dataset), "--protocols", protocol]
    if base_config is not None:
        # Only what this protocol reads (``parley eval`` refuses a setting that would change nothing).
        honoured = HONOURED.get(protocol, set(base_config))
        config = {k: v for k, v in base_config.items() if k in honoured and k not in ("protocol", "k_wiki")}
        cmd += ["--config", json.dumps(config, sort_keys=True)]
    cmd += ["--set", f"k_wiki={size}", "--limit", str(limit), "--primary", primary]
    cmd += ["--concurrency", str(concurrency), "--out", str(folder)]
    if not progress:
        cmd.append("--no-progress")
    return cmd


def run_study(
    args: argparse.Namespace,
    folders: Sequence[SizeFolder],
    protocols: Sequence[str],
    bases: dict[str, dict[str, Any]],
    runner: Runner,
) -> None:
    """Every protocol at every size not reused, protocol by protocol, smallest size first; ``bases``
    holds each protocol's configuration in the reused folder (none: the evaluation's defaults)."""
    for protocol in protocols:
        base = bases.get(protocol)
        for f in folders:
            if f.reused:
                continue
            cmd = eval_command(
                dataset=args.dataset,
                folder=f.folder,
                protocol=protocol,
                size=f.size,
                limit=args.limit,
                primary=args.primary,
                concurrency=args.concurrency,
                base_config=base,
                progress=not args.no_progress,
            )
            print(f"pool size {f.size}, {protocol}: {' '.join(cmd[1:])}", flush=True)
            rc = runner(cmd)
            if rc != 0:
                raise StudyError(f"the evaluation of {protocol} at pool size {f.size} stopped (exit {rc})")


def summarize(
    folders: Sequence[SizeFolder],
    protocols: Sequence[str],
    *,
    limit: int | None,
    samples: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Per protocol and size: accuracy with its CI, cost per question, and the paired difference
    against the smallest size over the first ``limit`` questions of each folder."""
    rows: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    primary = None
    for protocol in protocols:
        results: dict[str, dict[str, Any]] = {}
        order: list[str] | None = None
        for f in folders:
            ws = Workspace(f.folder)
            manifest = ws.load_manifest()
            if manifest is None:
                continue
            primary = primary or manifest.primary
            ids = [it.id for it in ws.load_items()][:limit]
            order = order or ids
            wanted = set(ids)
            got = {i: r for i, r in ws.load_results(protocol).items() if i in wanted}
            label = f"k{f.size}"
            results[label] = got
            ok = [r for r in got.values() if r.status == "ok" and r.scores is not None]
            acc, low, high = accuracy_ci(
                [r.scores.correct for r in ok if r.scores], samples=samples, seed=seed
            )
            transcripts = ws.load_transcripts(protocol)
            seen = [(r, transcripts[r.id].pool) for r in ok if r.id in transcripts]
            pools = [len(pool.items) for _, pool in seen]
            # Whether the pool held a gold answer at all: what the agents could have found.
            held = [has_answer([i.text for i in pool.items], list(r.gold)) for r, pool in seen]
            rows.append(
                {
                    "protocol": protocol,
                    "size": f.size,
                    "folder": str(f.folder),
                    "reused": f.reused,
                    "n": len(ok),
                    "failed": sum(1 for r in got.values() if r.status == "failed"),
                    "accuracy": acc,
                    "ci_low": low,
                    "ci_high": high,
                    **cost_per_question(ok),
                    "pool_items": metrics.mean(pools) if pools else None,
                    "answer_in_pool": metrics.mean(float(h) for h in held) if held else None,
                    # How well the model reads: accuracy on the questions whose pool held the answer.
                    "accuracy_when_held": metrics.mean(
                        r.scores.correct for (r, _), h in zip(seen, held, strict=True) if h and r.scores
                    )
                    if any(held)
                    else None,
                }
            )
        labels = list(results)
        for label in labels[1:]:
            c = compare_runs(labels[0], label, results, order or [], samples=samples, seed=seed)
            comparisons.append({"protocol": protocol, **c})
    return {"primary": primary, "limit": limit, "rows": rows, "comparisons": comparisons}


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _num(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def render(report: dict[str, Any], command: str) -> str:
    lines = [
        "# Pool size against end-to-end accuracy",
        "",
        f"Accuracy = **{report['primary']}**, first {report['limit']} questions of each folder; 95 % CIs by "
        f"bootstrap over questions. {report.get('machine', '')} Command: `{command}`",
        "",
        "| protocol | pool size | n | failed | accuracy % | 95 % CI | tokens/q | calls/q | s/q | pool items "
        "| answer in pool % | accuracy % when in pool | folder |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['protocol']} | {r['size']} | {r['n']} | {r['failed']} | {_pct(r['accuracy'])} "
            f"| [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] | {_num(r['tokens_per_q'], 0)} "
            f"| {_num(r['calls_per_q'], 1)} | {_num(r['seconds_per_q'], 1)} | {_num(r['pool_items'], 1)} "
            f"| {_pct(r['answer_in_pool'])} | {_pct(r['accuracy_when_held'])} "
            f"| {r['folder']}{' (reused)' if r['reused'] else ''} |"
        )
    lines += [
        "",
        "## Paired differences against the smallest pool",
        "",
        "Over the questions both sizes finished; a CI that contains 0 means the difference may be noise.",
        "",
        "| protocol | A | B | n | A % | B % | B − A (points) | 95 % CI | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in report["comparisons"]:
        if not c["n"]:
            lines.append(
                f"| {c['protocol']} | {c['a']} | {c['b']} | 0 | – | – | – | – "
                "| no question finished in both |"
            )
            continue
        verdict = (
            "may be noise" if c["ci_low"] <= 0 <= c["ci_high"] else ("better" if c["diff"] > 0 else "worse")
        )
        lines.append(
            f"| {c['protocol']} | {c['a']} | {c['b']} | {c['n']} "
            f"| {_pct(c['accuracy_a'])} | {_pct(c['accuracy_b'])} "
            f"| {100 * c['diff']:+.1f} | [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] | {verdict} |"
        )
    lines += ["", "![accuracy and tokens against pool size](pool_size.png)", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    fig, (acc_ax, tok_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for protocol in dict.fromkeys(r["protocol"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["protocol"] == protocol and r["accuracy"] is not None]
        if not rows:
            continue
        xs = [r["size"] for r in rows]
        ys = [100 * r["accuracy"] for r in rows]
        err = [
            [y - 100 * r["ci_low"] for y, r in zip(ys, rows, strict=True)],
            [100 * r["ci_high"] - y for y, r in zip(ys, rows, strict=True)],
        ]
        acc_ax.errorbar(xs, ys, yerr=err, marker="o", capsize=4, label=protocol)
        tok_ax.plot(xs, [r["tokens_per_q"] for r in rows], marker="o", label=protocol)
    acc_ax.set_xlabel("pool size (k_wiki)")
    acc_ax.set_ylabel(f"accuracy ({report['primary']}), % with 95 % CI")
    tok_ax.set_xlabel("pool size (k_wiki)")
    tok_ax.set_ylabel("tokens per question")
    for ax in (acc_ax, tok_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    save(fig, path, dpi=120)
    return path


def write_report(report: dict[str, Any], out: Path, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {**report, "machine": f"{os.cpu_count()} CPUs ({platform.machine()})."}
    (out / "pool_size.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "pool_size.md").write_text(render(report, command), encoding="utf-8")
    plot(report, out / "pool_size.png")


def _subprocess_runner(cmd: Sequence[str]) -> int:
    return subprocess.call(list(cmd))


def main(argv: Sequence[str] | None = None, runner: Runner = _subprocess_runner) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pool_size", description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", type=Path, default=Path("data/nq_open_vital_dev.jsonl"))
    ap.add_argument("--sizes", default="5,10,15", help="pool sizes (k_wiki), comma-separated")
    ap.add_argument("--protocols", default="rag,madke", help="protocols that use the pool, comma-separated")
    ap.add_argument("--limit", type=int, default=200, help="the first N questions")
    ap.add_argument(
        "--primary", default="strict_contains", help="accuracy metric: strict_contains|em|contains|judge"
    )
    ap.add_argument("--concurrency", type=int, default=2, help="questions debated at once per evaluation")
    ap.add_argument(
        "--reuse", action="append", default=[], help="SIZE=FOLDER: that size's runs exist already"
    )
    ap.add_argument("--out", type=Path, default=Path("reports/pool-size"))
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from what is there")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes)
        protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
        folders = plan(args.out, sizes, parse_reuse(args.reuse, sizes))
        # Every reused folder is checked before anything runs; the first one configures the new runs.
        bases: dict[str, dict[str, Any]] = {}
        for f in folders:
            if f.reused:
                for protocol in protocols:
                    bases.setdefault(protocol, reused_run(f, protocol, args.primary).config)
        if not args.report_only:
            run_study(args, folders, protocols, bases, runner)
    except StudyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = summarize(folders, protocols, limit=args.limit)
    command = "python -m bench.pool_size " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report(report, args.out, command)
    print((args.out / "pool_size.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

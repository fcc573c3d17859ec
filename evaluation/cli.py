"""``parley eval``: run protocols over a dataset and write a report that says which is better.

Only typer is imported at module level; the harness, the engine and matplotlib load inside the
command, so ``parley --help`` stays instant.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """``kill``, ``docker stop`` and CI time limits send SIGTERM: stop as on Ctrl-C (finished items stay
    saved, the embedded server is shut down by its context manager) instead of dying mid-item. A
    background job also ignores SIGINT, so SIGTERM is the way to stop it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def parse_compare(value: str | None) -> list[tuple[str, str]]:
    """``a:b,c:d`` → [(a, b), (c, d)]; the report gives each pair a paired bootstrap CI of b − a."""
    pairs = []
    for part in _csv(value):
        a, sep, b = part.partition(":")
        if not sep or not a.strip() or not b.strip():
            raise typer.BadParameter(f"{part!r} is not A:B", param_hint="--compare")
        pairs.append((a.strip(), b.strip()))
    return pairs


def _read_config_file(path: str) -> str:
    """A ``--config`` that is not inline JSON names a file; one that cannot be read is said so (an
    inline value is told apart by its bracket, so a long one is never taken for a file name)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise typer.BadParameter(
            f"neither a JSON object nor a readable JSON file: {reason}", param_hint="--config"
        ) from None


def parse_config(config: str | None, sets: list[str] | None) -> dict[str, Any]:
    """Base ``DebateConfig`` fields from a JSON file or inline JSON, then ``--set key=value`` overrides."""
    base: dict[str, Any] = {}
    if config:
        text = config if config.lstrip()[:1] in ("{", "[") else _read_config_file(config)
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(
                f"not a JSON file or JSON object: {exc.msg}", param_hint="--config"
            ) from None
        if not isinstance(loaded, dict):
            raise typer.BadParameter("must be a JSON object", param_hint="--config")
        base.update(loaded)
    for item in sets or []:
        key, sep, raw = item.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise typer.BadParameter(f"{item!r} is not key=value (or a.b=value)", param_hint="--set")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        # ``mallm.decision=majority`` sets one field of a protocol's own settings and keeps the others
        # that --config or an earlier --set gave.
        target = base
        for i, part in enumerate(path[:-1]):
            inner = target.setdefault(part, {})
            if not isinstance(inner, dict):
                where = ".".join(path[: i + 1])
                raise typer.BadParameter(f"{item!r}: {where} is {inner!r}, not an object", param_hint="--set")
            target = inner
        target[path[-1]] = value
    return base


def eval_command(
    ctx: typer.Context,
    out: Annotated[
        Path | None, typer.Option(help="output folder; rerun with the same folder to resume")
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            help="dataset: JSON lines or a JSON array (NQ, FEVER, multiple choice, KKS, MADKE, CIAR)"
        ),
    ] = None,
    protocols: Annotated[
        str | None,
        typer.Option(
            help="comma-separated protocols, first = baseline (default madke; with --preset: baselines)"
        ),
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="a paper's setup (see --list-presets); --set still overrides")
    ] = None,
    list_presets: Annotated[
        bool, typer.Option("--list-presets", help="list the presets and where their numbers come from")
    ] = False,
    benchmark: Annotated[
        str | None,
        typer.Option(
            help="benchmark name for the papers' published figures (default: guessed from the path)"
        ),
    ] = None,
    pool: Annotated[
        str, typer.Option(help="knowledge: file (the dataset's own pools), retriever, or auto")
    ] = "auto",
    suite: Annotated[
        str | None,
        typer.Option(
            help="a named suite (evidence: RAG, single, MADKE and the same-budget vote on --limit "
            "questions, default 300; CoT, self-consistency, MAD, society, MALLM on --extra-limit, 100)"
        ),
    ] = None,
    extra_limit: Annotated[
        int | None, typer.Option(min=1, help="--suite: questions of the second tier (default 100)")
    ] = None,
    paper_setting: Annotated[
        bool,
        typer.Option(
            "--paper-setting",
            help="--suite: MADKE in the paper's exact setting (the madke preset) and every run in the "
            "paper's wording",
        ),
    ] = False,
    same_budget: Annotated[
        bool,
        typer.Option(
            "--same-budget",
            help="add a self-consistency vote per debate run, given that debate's tokens per question",
        ),
    ] = False,
    prompt_styles: Annotated[
        str | None,
        typer.Option(
            help="comma-separated prompt styles, e.g. paper,robust (labels protocol-style); default: "
            "PARLEY_EVAL_PROMPT_STYLE (auto: robust on the embedded model, paper on an endpoint)"
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="first N usable items")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto|nq|fever|mc|kks|madke|ciar|numeric")] = "auto",
    on_error: Annotated[str, typer.Option(help="bad dataset lines: skip (reported) or fail")] = "skip",
    config: Annotated[str | None, typer.Option(help="base DebateConfig as a JSON file or JSON text")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="config override key=value (JSON value); a.b=value sets one of a protocol's own "
            "settings (mallm.decision=majority); repeatable",
        ),
    ] = None,
    primary: Annotated[str, typer.Option(help="accuracy for generative QA: em|contains|judge")] = "em",
    judge: Annotated[
        bool, typer.Option("--judge", help="also grade QA answers with the LLM judge (C.1)")
    ] = False,
    judge_url: Annotated[str | None, typer.Option(help="judge endpoint (PARLEY_EVAL_JUDGE_BASE_URL)")] = None,
    judge_model: Annotated[str | None, typer.Option(help="judge model (PARLEY_EVAL_JUDGE_MODEL)")] = None,
    compare: Annotated[
        str | None, typer.Option(help="extra pairs A:B,C:D for bootstrap CIs (besides first-listed vs each)")
    ] = None,
    api: Annotated[
        str | None, typer.Option(help="run through the Parley API at this URL (PARLEY_EVAL_API_URL)")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="API key for --api (PARLEY_EVAL_API_KEY)")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="questions debated at once (in-process)")] = 1,
    bootstrap_samples: Annotated[int | None, typer.Option(min=100, help="bootstrap resamples")] = None,
    seed: Annotated[int | None, typer.Option(help="bootstrap seed")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="delete earlier results in --out first")] = False,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="rebuild metrics, report and plots from --out; run nothing")
    ] = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="skip the PNG plots")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="no progress bars")] = False,
) -> None:
    """Run protocols (× prompt styles) over a dataset; write results, metrics.json, report.md and plots.

    Interrupted runs resume where they stopped: run the same command again.
    """
    import asyncio

    from rich.console import Console

    from evaluation.harness import EvalRequest, PlanError, rebuild_report
    from evaluation.settings import EvalSettings

    console = Console(stderr=True)
    if list_presets:
        _print_presets()
        return
    if out is None:
        raise typer.BadParameter("is required", param_hint="--out")
    settings = EvalSettings()
    _check_choices(on_error=on_error, primary=primary)
    pairs = parse_compare(compare)
    samples = bootstrap_samples or settings.bootstrap_samples
    boot_seed = settings.bootstrap_seed if seed is None else seed
    with errors_as_exit(console, out):
        if report_only:
            if suite is not None:
                _print_suite(console, _suite_report_only(suite, out, samples, boot_seed, not no_plots), out)
                return
            report = rebuild_report(out, compare=pairs, samples=samples, seed=boot_seed, plots=not no_plots)
            _print_summary(console, report, out)
            return
        if dataset is None:
            raise typer.BadParameter("is required (except with --report-only)", param_hint="--dataset")
        request = EvalRequest(
            dataset=dataset,
            out=out,
            protocols=_csv(protocols) if protocols is not None or preset else ["madke"],
            prompt_styles=_csv(prompt_styles) or None,
            limit=limit,
            fmt=fmt,
            on_error=on_error,  # type: ignore[arg-type]
            base_config=parse_config(config, set_),
            primary=primary,  # type: ignore[arg-type]
            compare=pairs,
            fresh=fresh,
            concurrency=concurrency,
            bootstrap_samples=samples,
            bootstrap_seed=boot_seed,
            plots=not no_plots,
            progress=not no_progress,
            max_consecutive_failures=settings.max_consecutive_failures,
            preset=preset,
            benchmark=benchmark,
            pool=pool,
            same_budget=same_budget,
            default_style=default_prompt_style(settings.prompt_style, api=bool(api or settings.api_url)),
        )
        evaluate_fn = None
        if suite is not None:
            if api or settings.api_url:
                raise PlanError(
                    "--suite runs in-process only (its same-budget vote sizes itself per question)"
                )
            request, evaluate_fn = _suite_plan(
                suite, request, limit, extra_limit, paper_setting, not no_plots
            )

        with sigterm_as_interrupt():
            outcome = asyncio.run(
                _evaluate(
                    request,
                    settings,
                    console,
                    use_judge=judge or primary == "judge",
                    judge_url=judge_url,
                    judge_model=judge_model,
                    api=api,
                    api_key=api_key,
                    ctx_obj=ctx.find_root().obj,
                    evaluate_fn=evaluate_fn,
                )
            )
    if suite is not None:
        _print_suite(console, outcome, out)
        return
    _print_outcome(console, outcome, out)


@contextlib.contextmanager
def errors_as_exit(console: Any, out: Path) -> Iterator[None]:
    """What ends an evaluation early, said in one line with its exit status instead of a traceback."""
    from evaluation.datasets import DatasetError
    from evaluation.harness import PlanError
    from evaluation.run_loop import EvalAborted
    from evaluation.store import WorkspaceError
    from services.errors import ParleyError

    try:
        yield
    except KeyboardInterrupt:
        console.print(
            f"[yellow]interrupted[/yellow]; finished items are saved in {out}. "
            "Run the same command to resume."
        )
        raise typer.Exit(130) from None
    except (DatasetError, PlanError, WorkspaceError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    except ValidationError as exc:
        # An operator's setting (PARLEY_… environment) the settings classes refuse: say which.
        console.print(f"[red]invalid setting:[/red] {exc}")
        raise typer.Exit(2) from None
    except ParleyError as exc:
        # The embedded model's server failing to start, a weight package missing, …: typed and explained.
        console.print(f"[red]{exc.__class__.__name__}:[/red] {exc}")
        raise typer.Exit(1) from None
    except EvalAborted as exc:
        console.print(f"[red]stopped:[/red] {exc}")
        raise typer.Exit(3) from None


def default_prompt_style(setting: str, *, api: bool) -> str:
    """The style of runs that name none: ``PARLEY_EVAL_PROMPT_STYLE``, where ``auto`` is the style the
    model answers reliably with. The embedded models (packaged or a local GGUF) read the papers'
    free-text prompts badly (64 % of the 1.5B's debater replies unreadable against 0.5 % robust,
    docs/benchmarks-and-reports.md), so an evaluation at the papers' wording would measure the prompt
    format more than the protocols. An endpoint whose model is one of the packaged models (served by
    ``parley llm serve`` or an evaluation's own server, named by its registry name or an old alias)
    gets robust too: the style follows the model, not where it runs. Any other endpoint, and the
    gateway, keep the papers' wording."""
    if setting != "auto":
        return setting
    from services.llm import ALIASES, MODELS, LLMSettings

    if api:
        return "paper"
    llm = LLMSettings()
    served = llm.model.strip()
    return "robust" if llm.base_url is None or served in MODELS or served in ALIASES else "paper"


def _check_choices(*, on_error: str, primary: str) -> None:
    if on_error not in ("skip", "fail"):
        raise typer.BadParameter("must be skip or fail", param_hint="--on-error")
    if primary not in ("em", "contains", "judge"):
        raise typer.BadParameter("must be em, contains or judge", param_hint="--primary")


def _print_outcome(console: Any, outcome: Any, out: Path) -> None:
    """Dataset lines skipped, pool entries dropped, the summary and the items to retry."""
    for problem in outcome.dataset.problems:
        console.print(f"[yellow]dataset {problem}[/yellow] (skipped)")
    if outcome.dataset.pool_items_dropped:
        console.print(
            f"[yellow]{outcome.dataset.pool_items_dropped} pool entries without text dropped[/yellow] "
            f"(pools of {outcome.dataset.items_with_pools} items)"
        )
    _print_summary(console, outcome.report, out)
    failed = sum(t.failed for t in outcome.tallies)
    if failed:
        console.print(f"[yellow]{failed} item(s) failed[/yellow]; run the same command again to retry them.")


async def _evaluate(
    request: Any,
    settings: Any,
    console: Any,
    *,
    use_judge: bool,
    judge_url: str | None,
    judge_model: str | None,
    api: str | None,
    api_key: str | None,
    ctx_obj: Any = None,
    evaluate_fn: Any = None,
) -> Any:
    """Build the real dependencies (LLM, pools, judge or the API client) and run the harness (or
    ``evaluate_fn``, a suite's two tiers, with the same dependencies)."""
    from evaluation.harness import PlanError, evaluate

    evaluate = evaluate_fn or evaluate
    from evaluation.judge import LLMJudge
    from services.llm import OpenAIChatClient

    judge = None
    judge_client = None
    if use_judge:
        url = judge_url or settings.judge_base_url
        if not url:
            raise PlanError("the LLM judge needs an endpoint: --judge-url or PARLEY_EVAL_JUDGE_BASE_URL")
        judge_client = OpenAIChatClient(
            url,
            judge_model or settings.judge_model,
            api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key else None,
            timeout_s=settings.judge_timeout_s,
            max_tokens=settings.judge_max_tokens,
        )
        judge = LLMJudge(judge_client, max_tokens=settings.judge_max_tokens)
        request.judge_model = judge_client.model
    try:
        api_url = api or settings.api_url
        if api_url:
            from parley_client import AsyncParleyClient

            key = api_key or (settings.api_key.get_secret_value() if settings.api_key else None)
            client = AsyncParleyClient(api_url, api_key=key, timeout_s=settings.api_timeout_s)
            try:
                return await evaluate(
                    request, judge=judge, batch_client=client, poll_interval_s=settings.api_poll_interval_s
                )
            finally:
                await client.aclose()
        in_process = getattr(ctx_obj, "evaluate_in_process", None)
        if in_process is None:
            raise PlanError("no in-process runner here: pass --api URL (the parley command wires one)")
        return await in_process(request, console, judge, evaluate)
    finally:
        if judge_client is not None:
            await judge_client.aclose()


def _suite_plan(
    name: str, request: Any, limit: int | None, extra_limit: int | None, paper_setting: bool, plots: bool
) -> tuple[Any, Any]:
    """The suite's first request (what the in-process runner prepares the LLM and pools for) and the
    function that runs both tiers with those dependencies and writes the suite report."""
    from evaluation.harness import evaluate as harness_evaluate
    from evaluation.suite import get_suite, run_suite, suite_requests

    chosen = get_suite(name)
    main, extra = suite_requests(
        chosen, request, main_limit=limit, extra_limit=extra_limit, paper_setting=paper_setting
    )

    async def evaluate_fn(_: Any, **deps: Any) -> Any:
        return await run_suite(chosen, main, extra, harness_evaluate, plots=plots, **deps)

    return main, evaluate_fn


def _suite_report_only(name: str, out: Path, samples: int, seed: int, plots: bool) -> dict[str, Any]:
    from evaluation.harness import PlanError
    from evaluation.store import Workspace
    from evaluation.suite import get_suite, write_suite_report

    ws = Workspace(out)
    manifest = ws.load_manifest()
    if manifest is None:
        raise PlanError(f"{out} holds no evaluation (no eval.json)")
    labels = [r.label for r in manifest.runs]
    return write_suite_report(ws, get_suite(name), labels=labels, samples=samples, seed=seed, plots=plots)


def _print_suite(console: Any, report: dict[str, Any], out: Path) -> None:
    """The suite's runs with their CIs, the verdict and where the report is."""
    from rich.table import Table

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f}"

    table = Table(title=f"suite {report['suite']} · accuracy = {report['primary']}")
    for col in ("run", "n", "acc%", "95% CI", "tok/q", "s/q", "unparseable%"):
        table.add_column(col, justify="left" if col == "run" else "right", no_wrap=col == "run")
    for r in report["runs"]:
        table.add_row(
            r["label"],
            str(r["n"]),
            pct(r["accuracy"]),
            f"[{pct(r['ci_low'])}, {pct(r['ci_high'])}]",
            "–" if r["tokens_per_q"] is None else f"{r['tokens_per_q']:.0f}",
            "–" if r["seconds_per_q"] is None else f"{r['seconds_per_q']:.1f}",
            pct(r["unparseable"]),
        )
    console.print(table)
    for line in report["verdict"]:
        console.print(line)
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print(
        f"report: {out / 'suite.md'} · {out / 'suite.json'} · plot: {out / 'plots' / 'cost_accuracy.png'}"
    )


def _print_presets() -> None:
    """``--list-presets``: name, what it runs, the paper and where its settings and figures come from."""
    from evaluation.presets import PRESETS

    for p in PRESETS.values():
        typer.echo(f"{p.name}: {p.summary}")
        typer.echo(f"    paper: {p.paper}")
        typer.echo(f"    source: {p.source}")
        typer.echo(f"    metric: {p.metric}; benchmarks with figures: {', '.join(p.benchmarks)}")
        typer.echo(f"    baselines (--protocols): {', '.join(p.baselines)}")
        for d in p.deviations:
            typer.echo(f"    differs: {d}")


def _print_summary(console: Any, report: dict[str, Any], out: Path) -> None:
    from rich.table import Table

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f}"

    table = Table(title=f"{report['items']} items · accuracy = {report['primary']}")
    for col in ("run", "ok", "fail", "acc%", "F1%", "Co2%", "Cons%", "rnds", "tok/q", "s/q"):
        table.add_column(col, justify="right" if col != "run" else "left", no_wrap=col == "run")
    for r in report["runs"]:
        table.add_row(
            r["label"],
            str(r["ok"]),
            str(r["failed"]),
            pct(r["accuracy"]),
            pct(r["f1"]),
            pct(r["co2"]),
            pct(r["cons"]),
            "–" if r["avg_rounds"] is None else f"{r['avg_rounds']:.2f}",
            "–" if r["tokens_per_q"] is None else f"{r['tokens_per_q']:.0f}",
            "–" if r["seconds_per_q"] is None else f"{r['seconds_per_q']:.2f}",
        )
    console.print(table)
    from evaluation.report_markdown import unparseable_warnings

    for warning in unparseable_warnings(report):
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for c in report["comparisons"]:
        if not c["n"]:
            console.print(f"{c['b']} − {c['a']}: no item finished in both runs yet")
            continue
        verdict = "[green]real[/green]" if c["significant"] else "[dim]may be noise[/dim]"
        console.print(
            f"{c['b']} − {c['a']}: {100 * c['diff']:+.1f} pp, 95% CI [{100 * c['ci_low']:+.1f}, "
            f"{100 * c['ci_high']:+.1f}] over {c['n']} items → {verdict}"
        )
    console.print(f"report: {out / 'report.md'} · metrics: {out / 'metrics.json'}")

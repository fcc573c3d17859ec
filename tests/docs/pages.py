"""Reading README.md and docs/*.md for the docs tests: code blocks with their markers, headings with
their GitHub anchors, and links.

Snippet convention (every ``bash``, ``sh``, ``shell``, ``console`` and ``python`` block of a page):
an HTML comment on the line right before the opening fence says what tests it,

- ``<!-- snippet: live -->``: ``tests/docs/test_live.py`` runs it against a live stack (gateway,
  worker, Redis, the retriever's port and the scripted LLM; ``127.0.0.1:8000`` is rewritten to the
  test gateway);
- ``<!-- snippet: tested-by tests/…/test_x.py -->``: that test module runs it;
- ``<!-- snippet: not-run (reason) -->``: not run, for the reason given (it needs Docker, the real
  model, a GPU, hours, a file you bring, …).

A page may instead say once, anywhere before its first block,
``<!-- snippets: not-run (reason) -->``: every unmarked block of that page is not run for that reason
(the benchmark pages: each command needs the real model and minutes to hours). Whatever the marker,
every ``parley …``, ``make …`` and ``python -m …`` command in every block is checked against the code
(``tests/docs/test_commands.py``).
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Paths the pages quote from other repositories: published benchmark files a reader brings.
UPSTREAM_PATHS = {"data/CounterintuitiveQA/CIAR.json", "data/nq/test_all_retrieval_500.json"}
SNIPPET_LANGS = {"bash", "sh", "shell", "console", "python"}
MARKER = re.compile(r"^<!--\s*snippet:\s*(live|tested-by\s+\S+|not-run\s*\((?P<reason>[^)]+)\))\s*-->\s*$")
PAGE_MARKER = re.compile(r"^<!--\s*snippets:\s*not-run\s*\((?P<reason>[^)]+)\)\s*-->\s*$", re.MULTILINE)
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)")


def pages() -> list[Path]:
    """README.md and every page of docs/ (whatever pages exist when the test runs)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # "live", "tested-by PATH", "not-run"
    reason: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    page_default = PAGE_MARKER.search("\n".join(lines))
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        marker = reason = None
        prev = lines[start - 1].strip() if start else ""
        mm = MARKER.match(prev)
        if mm:
            marker = mm.group(1).split("(")[0].strip()
            reason = mm["reason"]
        elif page_default is not None:
            marker, reason = "not-run", page_default["reason"]
        out.append(Block(page, start + 1, m["lang"].lower(), "\n".join(body) + "\n", marker, reason))
    return out


def snippets() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.lang in SNIPPET_LANGS]


def prose(page: Path) -> str:
    """The page without its code blocks and inline code (links inside them are not links)."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^([ \t]*)(```+|~~~+).*?^\1\2[ \t]*$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of a page: its headings' slugs (repeats get -1, -2, …) and explicit ids."""
    text = page.read_text(encoding="utf-8")
    text_wo_code = re.sub(r"^([ \t]*)(```+|~~~+).*?^\1\2[ \t]*$", "", text, flags=re.MULTILINE | re.DOTALL)
    seen: dict[str, int] = {}
    out: set[str] = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text_wo_code, re.MULTILINE):
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    out |= set(re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", text))
    return out


LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+)\)")
AUTOLINK = re.compile(r"<(?P<target>https?://[^>]+)>")


@dataclass(frozen=True)
class Link:
    page: Path
    target: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)} → {self.target}"


def links(page: Path) -> list[Link]:
    text = prose(page)
    found = [m["target"] for m in LINK.finditer(text)] + [m["target"] for m in IMAGE.finditer(text)]
    found += [m["target"] for m in AUTOLINK.finditer(text)]
    return [Link(page, t) for t in found]


@cache
def checkout_paths() -> frozenset[str]:
    """Files and folders a clean clone has once the work in progress is committed: tracked files and
    untracked ones git does not ignore. Run-time folders (var/, models/, a filled wheelhouse/) are left
    out even where this checkout has them, so the test decides here as it does in CI."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    paths: set[str] = set()
    for name in listed:
        parts = name.split("/")
        paths.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(paths)

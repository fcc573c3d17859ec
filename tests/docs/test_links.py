"""Every link of README.md and docs/*.md resolves: relative files exist in the repository, ``#anchors``
name a heading of the target page (GitHub's slugs), and nothing points outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.docs.pages import ROOT, UPSTREAM_PATHS, Link, anchors, checkout_paths, links, pages

pytestmark = pytest.mark.unit


def all_links() -> list[Link]:
    return [link for page in pages() for link in links(page)]


def broken(link: Link) -> str | None:
    target = link.target
    parsed = urlparse(target)
    if parsed.scheme in ("http", "https"):
        host = parsed.hostname or ""
        # Links to the running service are examples, not documents.
        return None if host else f"no host in {target}"
    if parsed.scheme in ("mailto",):
        return None
    if parsed.scheme:
        return f"unexpected scheme {parsed.scheme}"
    path, _, fragment = target.partition("#")
    file = link.page if not path else (link.page.parent / unquote(path)).resolve()
    try:
        file.relative_to(ROOT)
    except ValueError:
        return "points outside the repository"
    if not file.exists():
        return "no such file"
    if fragment:
        if file.suffix != ".md":
            return None
        if fragment not in anchors(file):
            return f"no heading #{fragment} in {file.relative_to(ROOT)}"
    return None


def test_there_are_pages_and_links() -> None:
    assert len(pages()) >= 10
    assert len(all_links()) > 100


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = [f"{link.where}: {why}" for link in all_links() if (why := broken(link))]
    assert problems == []


def linked_files() -> list[tuple[str, str]]:
    """(where, repository path) for every link to a file of the repository."""
    found = []
    for link in all_links():
        path = link.target.partition("#")[0]
        if path and not urlparse(link.target).scheme:
            target = (link.page.parent / unquote(path)).resolve()
            if target.is_relative_to(ROOT):
                found.append((link.where, target.relative_to(ROOT).as_posix()))
    return found


@pytest.mark.integration  # asks git what a clean clone holds
def test_every_linked_file_is_in_a_clean_clone() -> None:
    """A link to a file this disk has only because a command wrote it (git ignores it) is broken in a
    fresh clone, though it resolves here."""
    found = linked_files()
    assert len(found) > 50
    present = checkout_paths()
    assert [f"{where}: {path}" for where, path in found if path.rstrip("/") not in present] == []


def test_no_document_script_or_report_points_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared\b")
    hits = []
    for folder in ("docs", "bench", "scripts", "reports", "data", "deploy"):
        for path in (ROOT / folder).rglob("*"):
            readable = path.is_file() and path.suffix in {
                ".md",
                ".py",
                ".json",
                ".sh",
                ".yml",
                ".yaml",
                ".txt",
            }
            if readable and outside.search(path.read_text(encoding="utf-8", errors="replace")):
                hits.append(str(path.relative_to(ROOT)))
    for path in (ROOT / "README.md", ROOT / "Makefile"):
        if outside.search(path.read_text(encoding="utf-8")):
            hits.append(path.name)
    assert hits == []


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("`ApiClientSettings` — `PARLEY_API_`", "apiclientsettings--parley_api_"),
        (
            "Choosing the embedded default: 0.5B or 1.5B, paper or robust prompts",
            "choosing-the-embedded-default-05b-or-15b-paper-or-robust-prompts",
        ),
        ("MCP (`parley mcp`)", "mcp-parley-mcp"),
    ],
)
def test_github_slugs(heading: str, slug: str) -> None:
    from tests.docs.pages import github_slug

    assert github_slug(heading) == slug


def test_a_missing_anchor_is_found(tmp_path: Path) -> None:
    page = ROOT / "README.md"
    assert broken(Link(page, "docs/configuration.md#no-such-heading"))
    assert broken(Link(page, "docs/no-such-page.md"))
    assert broken(Link(page, "../elsewhere/x.jsonl")) == "points outside the repository"
    assert broken(Link(page, "docs/configuration.md")) is None


@pytest.mark.integration  # asks git what a clean clone holds
def test_every_repository_path_in_inline_code_exists() -> None:
    """`engine/runner.py`, `tests/api/test_flow.py`, `data/formats/`: files the pages name are in the
    checkout (a module that moves must take its mentions with it). Paths git ignores are what the
    product or a make target writes at run time (`var/`, `wheelhouse/sdist`): named, never shipped."""
    present = checkout_paths()
    tops = {p.split("/")[0] for p in present if "/" in p}
    mentioned = set()
    for page in pages():
        for m in re.finditer(r"`([A-Za-z0-9_./-]+)`", page.read_text(encoding="utf-8")):
            path = m.group(1).split("::")[0]
            if "/" in path and path.split("/")[0] in tops and path not in UPSTREAM_PATHS:
                mentioned.add((page.relative_to(ROOT).as_posix(), path.rstrip("/")))
    absent = sorted({path for _, path in mentioned if path not in present})
    ignored = set(
        subprocess.run(
            ["git", "check-ignore", "--no-index", *absent], cwd=ROOT, capture_output=True, text=True
        ).stdout.splitlines()
    )
    missing = [
        f"{page}: {path}" for page, path in sorted(mentioned) if path in absent and path not in ignored
    ]
    assert missing == []

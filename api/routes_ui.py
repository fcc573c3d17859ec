"""The web page at ``/ui``: static files that talk to the public API only (``api/ui/``).

No build step and no CDN: three hand-written files served from the package, so the page works
offline and ``make demo`` needs no JavaScript toolchain. A strict Content-Security-Policy backs the
page's own rule of never turning data into markup: even an injected ``<script>`` could not run.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from api.problems import Problem

UI_DIR = Path(__file__).resolve().parent / "ui"

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}

# Scripts and styles only from this origin, no inline script, no plugins, no framing. blob: is the
# JSON and JSONL the page itself built from API responses (its download links).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@cache
def _asset(name: str) -> bytes:
    """The file's bytes, read once per process (the files ship with the package and never change)."""
    return (UI_DIR / name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_asset(name), media_type=ASSETS[name], headers=HEADERS)


@router.get("/")
async def root() -> RedirectResponse:
    """The bare address opens the page."""
    return RedirectResponse("/ui", status_code=307)


@router.get("/ui")
@router.get("/ui/")
async def page() -> Response:
    return _serve("index.html")


@router.get("/ui/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise Problem(404, f"no page asset {name!r}", type_="/problems/not-found")
    return _serve(name)

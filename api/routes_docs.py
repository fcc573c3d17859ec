"""The API reference at ``/docs``: a small page of our own that renders ``/openapi.json``.

FastAPI's default ``/docs`` loads Swagger UI from a CDN, so it is blank offline and would need the
page's Content-Security-Policy opened to a third party. This page is three hand-written files next to
the ``/ui`` page's (``api/ui/reference.*``), served under the same policy: nothing is contacted but
this origin, and no description text is ever turned into markup.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from api.problems import Problem
from api.routes_ui import HEADERS, UI_DIR

ASSETS = {
    "reference.html": "text/html; charset=utf-8",
    "reference.js": "text/javascript; charset=utf-8",
    "reference.css": "text/css; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


def _serve(name: str) -> Response:
    return Response((UI_DIR / name).read_bytes(), media_type=ASSETS[name], headers=HEADERS)


@router.get("/docs")
async def reference() -> Response:
    """The API reference page (public, like ``/openapi.json``: it holds no data)."""
    return _serve("reference.html")


@router.get("/docs/{name}")
async def reference_asset(name: str) -> Response:
    if name not in ASSETS or name == "reference.html":
        raise Problem(404, f"no reference asset {name!r}", type_="/problems/not-found")
    return _serve(name)

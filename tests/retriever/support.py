"""Real things for retriever tests: an index over a slice of the bundled corpus, a JSON replay server
(for web search providers and the client's fault tests), and the retriever app under uvicorn.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from parley_testing.processes import AppServer as AppServer  # re-exported: the retriever tests use it
from parley_testing.scripted_llm import free_port
from retriever.settings import RetrieverSettings

# A slice of the real Vital Articles corpus with questions whose answer article is known.
SLICE_TITLES = [
    "Albert Einstein",
    "Paris",
    "Moon",
    "Photosynthesis",
    "Mount Everest",
    "Apollo 11",
    "Neil Armstrong",
    "Mona Lisa",
    "Leonardo da Vinci",
    "William Shakespeare",
    "Pacific Ocean",
    "Great Wall of China",
    "Penicillin",
    "Alexander Fleming",
    "Amazon River",
    "Eiffel Tower",
    "Jupiter",
    "Tokyo",
    "Charles Darwin",
    "DNA",
    "Isaac Newton",
    "Ludwig van Beethoven",
    "Hamlet",
    "Nile",
    "Mars",
    "Volcano",
    "Chess",
    "Basketball",
]

KNOWN_QUESTIONS = [
    ("who painted the mona lisa", "Mona Lisa"),
    ("what is the highest mountain on earth above sea level", "Mount Everest"),
    ("who discovered penicillin in 1928", "Alexander Fleming"),
    ("which planet is known as the red planet", "Mars"),
    ("what is the capital of japan", "Tokyo"),
    ("who developed the theory of relativity", "Albert Einstein"),
]


def slice_settings(data_dir: Path, **kw: Any) -> RetrieverSettings:
    return RetrieverSettings(data_dir=data_dir, **{"warmup": False, **kw})


def build_slice_index(data_dir: Path, titles: list[str] | None = None) -> RetrieverSettings:
    """Dense + BM25 index of ``titles`` (default ``SLICE_TITLES``) of the real bundled corpus."""
    from retriever.corpus import read_vital
    from retriever.indexer import build_index

    settings = slice_settings(data_dir)
    passages = list(read_vital(100, titles=titles or SLICE_TITLES))
    build_index(settings, passages, corpus="vital", total=len(passages), progress=False)
    return settings


def add_second_stage(data_dir: Path, model: str) -> RetrieverSettings:
    """The second stage's collection beside the slice index in ``data_dir``, encoded by ``model``'s real
    weights; returns the stage's settings."""
    from retriever.corpus import read_vital
    from retriever.indexer import build_index

    stage = slice_settings(data_dir, rerank_model=model, ingest_workers=1).rerank_settings()
    passages = list(read_vital(100, titles=SLICE_TITLES))
    build_index(stage, passages, corpus="vital", progress=False, bm25=False)
    return stage


def copy_index(src: Path, dst: Path) -> Path:
    """A private copy of a built index (the embedded store allows one open client per folder)."""
    shutil.copytree(src, dst)
    return dst


Responder = Callable[[str, str, bytes], tuple[int, Any, float]]


class ReplayServer:
    """A real HTTP server on a free port that answers each request with ``(status, body, delay_s)``.

    ``body`` may be a dict/list (sent as JSON) or a str/bytes (sent as is, for malformed-JSON tests).
    Requests are recorded as ``(method, path_with_query, headers, body)``.
    """

    def __init__(self, responder: Responder, port: int | None = None) -> None:
        self.responder = responder
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                status, payload, delay = outer.responder(self.command, self.path, body)
                if delay:
                    time.sleep(delay)
                if isinstance(payload, dict | list):
                    data, ctype = json.dumps(payload).encode(), "application/json"
                elif isinstance(payload, str):
                    data, ctype = payload.encode(), "application/json"
                else:
                    data, ctype = bytes(payload), "application/octet-stream"
                try:
                    self.send_response(status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            do_GET = _handle
            do_POST = _handle
            do_PUT = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.port = port or free_port()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


# Response bodies in each provider's real JSON shape (fields as documented by the providers, trimmed).
def serper_body(results: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "searchParameters": {
            "q": "q",
            "gl": "us",
            "hl": "en",
            "type": "search",
            "num": 10,
            "engine": "google",
        },
        "knowledgeGraph": {
            "title": "Mona Lisa",
            "type": "Painting",
            "description": "The Mona Lisa is a half-length portrait painting by Leonardo da Vinci.",
            "descriptionSource": "Wikipedia",
            "descriptionLink": "https://en.wikipedia.org/wiki/Mona_Lisa",
            "attributes": {"Artist": "Leonardo da Vinci"},
        },
        "organic": [
            {
                "title": t,
                "link": u,
                "snippet": s,
                "sitelinks": [{"title": "More", "link": u + "#more"}],
                "position": i,
            }
            for i, (t, s, u) in enumerate(results, start=1)
        ],
        "peopleAlsoAsk": [
            {
                "question": "Why is the Mona Lisa famous?",
                "snippet": "…",
                "title": "…",
                "link": "https://example.org/",
            }
        ],
        "relatedSearches": [{"query": "mona lisa painter"}],
        "credits": 1,
    }


def searxng_body(results: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "query": "q",
        "number_of_results": 0,
        "results": [
            {
                "url": u,
                "title": t,
                "content": s,
                "engine": "duckduckgo",
                "parsed_url": ["https", u.split("/")[2], "/" + "/".join(u.split("/")[3:]), "", "", ""],
                "template": "default.html",
                "engines": ["duckduckgo", "google"],
                "positions": [i, i + 1],
                "score": 4.0 / i,
                "category": "general",
                "publishedDate": None,
                "thumbnail": "",
                "priority": "",
            }
            for i, (t, s, u) in enumerate(results, start=1)
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": ["mona lisa painter"],
        "unresponsive_engines": [["brave", "timeout"]],
    }


def brave_body(results: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "query": {
            "original": "q",
            "show_strict_warning": False,
            "is_navigational": False,
            "spellcheck_off": True,
            "country": "us",
            "more_results_available": True,
        },
        "mixed": {
            "type": "mixed",
            "main": [{"type": "web", "index": 0, "all": False}],
            "top": [],
            "side": [],
        },
        "type": "search",
        "web": {
            "type": "search",
            "results": [
                {
                    "title": t,
                    "url": u,
                    "is_source_local": False,
                    "is_source_both": False,
                    # Brave highlights query terms with <strong> and escapes entities.
                    "description": s.replace("Leonardo", "<strong>Leonardo</strong>").replace("&", "&amp;"),
                    "profile": {"name": "Site", "url": u, "long_name": u.split("/")[2], "img": ""},
                    "language": "en",
                    "family_friendly": True,
                    "type": "search_result",
                    "subtype": "generic",
                    "meta_url": {
                        "scheme": "https",
                        "netloc": u.split("/")[2],
                        "hostname": u.split("/")[2],
                        "favicon": "",
                        "path": "",
                    },
                }
                for (t, s, u) in results
            ],
            "family_friendly": True,
        },
    }


WEB_RESULTS = [
    (
        "Mona Lisa - Wikipedia",
        "The Mona Lisa is a portrait by Leonardo da Vinci, painted between 1503 and 1519.",
        "https://en.wikipedia.org/wiki/Mona_Lisa",
    ),
    (
        "Mona Lisa | Louvre",
        "Leonardo's portrait of Lisa Gherardini & her smile, on view in the Louvre, Paris.",
        "https://www.louvre.fr/en/explore/the-palace/mona-lisa",
    ),
    (
        "Who painted the Mona Lisa?",
        "Leonardo da Vinci began painting the Mona Lisa around 1503 in Florence.",
        "https://www.britannica.com/topic/Mona-Lisa-painting",
    ),
]

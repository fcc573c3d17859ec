"""scripts/pip_install.py: a failed install names the package, the cause and the fix for that cause.

The pip outputs under data/pip/ were recorded from pip 23 and 26 (`pip install` of a wrong hash, a
requirement without a hash, an unknown package, a source-only package with --only-binary); the index is
a real HTTP server serving a PEP 503 simple page, or a closed port.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "pip"


pip_install = load_script("pip_install")
WHEEL_HERE = "demo_pkg-1.2.0-py3-none-any.whl"
WHEEL_ELSEWHERE = "demo_pkg-1.3.0-cp311-cp311-win_amd64.whl"
SDIST = "demo_pkg-1.4.0.tar.gz"


@pytest.fixture
def index() -> Iterator[str]:
    """A simple index that knows demo-pkg: 1.2.0 as a universal wheel, 1.3.0 for Windows only, 1.4.0 as
    source only."""
    page = "".join(
        f'<a href="../../files/{f}#sha256=00">{f}</a>' for f in (WHEEL_HERE, WHEEL_ELSEWHERE, SDIST)
    )

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/simple/demo-pkg":
                body = f"<html><body>{page}</body></html>".encode()
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.unit
def test_a_hash_mismatch_names_the_file_and_never_suggests_editing_the_hash() -> None:
    found = pip_install.diagnose((DATA / "hash-mismatch.txt").read_text(), [], {})
    assert found.package == "six==1.17.0"
    assert "does not have the sha256" in found.cause and "files.pythonhosted.org" in found.cause
    assert "pip cache purge" in found.fix and "Never edit a hash" in found.fix


@pytest.mark.unit
def test_a_requirement_the_lock_lacks_sends_to_make_lock() -> None:
    found = pip_install.diagnose((DATA / "not-in-lock.txt").read_text(), [], {})
    assert found.package == "six==1.17.0" and "not pinned" in found.cause
    assert "`make lock`" in found.fix


@pytest.mark.unit
def test_each_not_found_cause_is_told_apart_by_asking_the_index(index: str) -> None:
    def why(version: str, package: str = "demo-pkg") -> Any:
        output = f"ERROR: No matching distribution found for {package}=={version}\n"
        return pip_install.diagnose(output, ["--index-url", index], {})

    missing = why("9.9.9")
    assert "has no file of demo-pkg==9.9.9" in missing.cause and "mirror" in missing.fix
    unknown = why("1.0", package="other-pkg")
    assert "does not know other-pkg" in unknown.cause
    windows_only = why("1.3.0")
    assert "no wheel of demo-pkg==1.3.0 fits this platform" in windows_only.cause
    assert "win_amd64" in windows_only.cause and "Linux x86-64 with CPython 3.11" in windows_only.fix
    source_only = why("1.4.0")
    assert "only as a source distribution" in source_only.cause and "report it" in source_only.fix
    # A universal wheel the index does list: pip excluded it for a reason of its own options.
    assert "excluded it" in why("1.2.0").cause


@pytest.mark.unit
def test_an_unreachable_index_is_named_with_the_setting_that_moves_it() -> None:
    index = f"http://127.0.0.1:{_closed_port()}/simple"
    found = pip_install.diagnose(
        "ERROR: No matching distribution found for six==1.17.0\n", [], {"PIP_INDEX_URL": index}
    )
    assert found.cause == f"the package index {index} cannot be reached"
    assert "PIP_INDEX_URL" in found.fix


@pytest.mark.unit
def test_an_unknown_failure_adds_nothing() -> None:
    assert pip_install.diagnose("ERROR: something pip never says\n", [], {}) is None


@pytest.mark.integration
def test_the_wrapper_passes_pip_through_and_appends_the_diagnosis(tmp_path: Path) -> None:
    """A real pip run against the closed port: pip's own lines come first, then the one block."""
    index = f"http://127.0.0.1:{_closed_port()}/simple"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(venv / "bin/python"), str(ROOT / "scripts/pip_install.py"), "--index-url", index,
         "--retries", "0", "--timeout", "3", "--no-cache-dir", "six==1.17.0"],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"},
    )  # fmt: skip
    assert done.returncode != 0
    assert "No matching distribution found for six==1.17.0" in done.stdout
    assert f"error: installing six==1.17.0 failed: the package index {index} cannot be reached" in done.stderr

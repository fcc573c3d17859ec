"""``parley_client`` installed alone: a wheel of ``parley_client/pyproject.toml`` (parley_client and
parley_wire) in a clean virtual environment that holds nothing but it, httpx and pydantic (and what
those two need), talking to the live gateway. Nothing of the gateway, the worker or the engine is
importable there.

The clean environment gets httpx and pydantic from this machine's installed copies (a ``.pth`` file
over a folder of links to exactly their distributions), so the test needs no network.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.api.conftest import KEY_A
from tests.api.support import ROOT, ApiServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHECK = """
import importlib.util, sys
import parley_client, parley_wire
from parley_client import ParleyClient, ParleyNotFound
assert parley_client.__file__.startswith(sys.prefix), parley_client.__file__
absent = [m for m in ("api", "services", "engine", "evaluation", "fastapi", "redis", "celery",
                      "pydantic_settings", "tqdm") if importlib.util.find_spec(m) is not None]
assert not absent, absent
url, key = sys.argv[1], sys.argv[2]
with ParleyClient(url, api_key=key) as client:
    accepted = client.submit("What is the capital of France?", {"protocol": "single"})
    view = client.wait(accepted.job_id, timeout_s=60)
    assert view.status == "completed", view
    types = [e.type for e in client.events(accepted.job_id)]
    assert types[0] == "job.queued" and types[-1] == "job.completed", types
    try:
        client.get("job_0000")
    except ParleyNotFound:
        pass
    else:
        raise AssertionError("an unknown job must raise ParleyNotFound")
    print("answer:", view.result["answer"], "| owner:", client.usage().owner)
"""


def _closure(names: list[str]) -> set[str]:
    """The installed distributions ``names`` need on this interpreter, themselves included (extras not
    followed; a requirement whose marker does not hold here, such as ``python_version < "3.11"``, is not
    needed and may well not be installed)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        requirement = Requirement(todo.pop())
        name = re.sub(r"[-_.]+", "-", requirement.name.lower())
        if name in seen:
            continue
        seen.add(name)
        for req in md.requires(name) or []:
            marker = Requirement(req).marker
            if marker is None or marker.evaluate({"extra": ""}):
                todo.append(req)
    return seen


def _link_distributions(names: set[str], into: Path) -> None:
    """Links to the top-level modules and packages of installed distributions ``names``."""
    into.mkdir()
    for name in names:
        dist = md.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if top.endswith((".dist-info", ".pth")) or top == "__pycache__":
                continue
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)
        info = Path(str(dist._path))  # type: ignore[attr-defined]  # its metadata, so versions resolve
        if not (into / info.name).exists():
            (into / info.name).symlink_to(info)


def test_the_client_alone_in_a_clean_venv_talks_to_the_gateway(gateway: ApiServer, tmp_path: Path) -> None:
    # The build sees a copy of exactly what the client's distribution packages, not the whole repository.
    src = tmp_path / "src"
    for package in ("parley_client", "parley_wire"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)]
    subprocess.run([*build, str(src / "parley_client")], check=True, timeout=300)
    (wheel,) = dist.glob("parley_client-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run(install, check=True, timeout=300)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    _link_distributions(_closure(["httpx", "pydantic"]), tmp_path / "deps")
    (site / "deps.pth").write_text(str(tmp_path / "deps") + "\n")
    out = subprocess.run(
        [str(python), "-I", "-c", CHECK, gateway.url, KEY_A],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "answer: Paris | owner: alice" in out.stdout, out.stdout

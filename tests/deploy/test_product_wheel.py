"""What the product wheel carries: the packages pyproject names, and none of the test helpers, tests or
benchmarks (they run from a checkout; the compose test mounts the scripted LLM's package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {
    "api", "debate_worker", "engine", "evaluation", "inprocess", "parley_cli", "parley_client",
    "parley_wire", "retriever", "services",
}  # fmt: skip


def test_the_wheel_holds_the_product_packages_and_no_test_code(tmp_path: Path) -> None:
    # Built from a copy: an in-tree setuptools build would leave build/ and egg-info behind.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "reports", "var", ".parley", "build", "*.egg-info", "wheelhouse"
        ),
    )
    dist = tmp_path / "dist"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(dist),
        str(source),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("parley-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == PRODUCT
    # The data the product reads at run time travels with it.
    assert "services/llm/models.json" in names
    assert any(n.startswith("api/ui/") for n in names)
    assert (ROOT / "Dockerfile").read_text().count("parley_testing") == 0

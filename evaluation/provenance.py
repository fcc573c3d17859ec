"""An evaluation folder's provenance (``provenance.jsonl``): one line per in-process invocation,
written by the runner that knows the model and the index (``inprocess.provenance``), read back by the
report, which prints the latest and says where invocations differ in what decides the answers."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from evaluation.store import Workspace, now_iso

# What two invocations (or two folders) must share for their answers to be compared as one run's:
# the code, the locked dependencies, the model and the index. The machine only changes the seconds.
DECISIVE = (("code", "commit"), ("code", "lock_sha256"), ("model",), ("index",))

ROOT = Path(__file__).resolve().parent.parent


def code_version(root: Path = ROOT) -> dict[str, Any]:
    """The git commit of a checkout (and whether its tracked files differ from it), else the installed
    package's version."""
    out: dict[str, Any] = {"package": _package_version()}
    if (root / ".git").exists():
        try:
            head = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if head.returncode == 0:
                out["commit"] = head.stdout.strip()
                out["modified"] = bool(dirty.stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    lock = root / "requirements.lock"
    if lock.exists():
        out["lock_sha256"] = hashlib.sha256(lock.read_bytes()).hexdigest()
    return out


def _package_version() -> str | None:
    try:
        return metadata.version("parley")
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    gpu = None
    cards = Path("/proc/driver/nvidia/gpus")
    if cards.is_dir():
        gpu = len(list(cards.iterdir()))
    return {
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "nvidia_gpus": gpu,
    }


def cpu_model() -> str | None:
    """The CPU's name as the kernel reports it (``/proc/cpuinfo``), where it does."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def provenance_path(root: Path) -> Path:
    return root / "provenance.jsonl"


def log_provenance(ws: Workspace, provenance: dict[str, Any]) -> None:
    """Append this invocation's provenance (with the time) to the folder's."""
    with provenance_path(ws.root).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"at": now_iso(), **provenance}, sort_keys=True) + "\n")


def load_provenance(root: Path) -> list[dict[str, Any]]:
    path = provenance_path(root)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _at(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = record
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The decisive parts in which two provenance records differ, named (``model``, ``code.commit``…)."""
    return [".".join(keys) for keys in DECISIVE if _at(a, keys) != _at(b, keys)]


def provenance_summary(root: Path) -> dict[str, Any] | None:
    """The latest invocation's provenance and, when earlier invocations differ from it in a decisive
    part, which parts: results made under both are then mixed in this folder."""
    records = load_provenance(root)
    if not records:
        return None
    latest = records[-1]
    mixed = sorted({part for earlier in records[:-1] for part in differences(earlier, latest)})
    return {"invocations": len(records), "latest": latest, "differs_across_invocations": mixed}

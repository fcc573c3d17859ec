"""An evaluation folder's provenance (``provenance.jsonl``): one line per in-process invocation,
written by the runner that knows the model and the index (``inprocess.provenance``), read back by the
report, which prints the latest and says where invocations differ in what decides the answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluation.store import Workspace, now_iso

# What two invocations (or two folders) must share for their answers to be compared as one run's:
# the code, the locked dependencies, the model and the index. The machine only changes the seconds.
DECISIVE = (("code", "commit"), ("code", "lock_sha256"), ("model",), ("index",))


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

"""What an index build recorded (``manifest.json``) and the messages about a missing or outdated index.

Kept apart from ``retriever.indexer`` (the build pipeline, which opens the stores) so the search path can
tell an empty index from an outdated one without importing any store backend.
"""

from __future__ import annotations

import json
from typing import Any

from retriever.settings import RetrieverSettings

# Version of the on-disk index layout; an index of another version is rebuilt, never half-read.
INDEX_FORMAT = 2

BUILD_HINT = "run `parley index build` (default corpus: the bundled Wikipedia Vital Articles)"


class IndexMissing(RuntimeError):
    """No dense index yet; the message says how to build it."""


def read_manifest(settings: RetrieverSettings) -> dict[str, Any]:
    """The manifest of the last build in ``data_dir``, or ``{}`` when none is readable."""
    try:
        data = json.loads(settings.manifest_path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_manifest(settings: RetrieverSettings, data: dict[str, Any]) -> None:
    """Replace the manifest atomically, so a crash mid-write leaves the previous one readable."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    tmp = settings.manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(settings.manifest_path)


def outdated_index_hint(settings: RetrieverSettings) -> str | None:
    """A rebuild message when ``data_dir`` holds an index of an older layout, else None."""
    manifest = read_manifest(settings)
    if manifest and manifest.get("format") != INDEX_FORMAT and manifest.get("passages"):
        return (
            f"the index in {settings.data_dir} was built by an older Parley (layout "
            f"{manifest.get('format', 1)}, this version reads {INDEX_FORMAT}): rebuild it with "
            "`parley index build` (the old passages in its qdrant/ folder can then be deleted)"
        )
    return None

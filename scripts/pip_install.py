#!/usr/bin/env python3
"""`pip install` (or `pip wheel`) for the Makefile, with a failure that names its package, cause and fix.

    python scripts/pip_install.py [--pip-command wheel] PIP-ARGUMENTS...

pip's output is passed through unchanged. When pip fails, its output is read for the package that
failed and the cause, and one block is printed at the end:

- **not on the index**: the index answers, but has no file of that version (a partial mirror);
- **no wheel for this platform**: the version is there, but not as a wheel this interpreter can install
  (the lock is made for Linux x86-64, CPython 3.11; `make install` compiles nothing);
- **index unreachable**: no answer from the index (network, proxy, PIP_INDEX_URL);
- **hash mismatch**: a downloaded file is not the one the lock records (a proxy or mirror serving other
  bytes, or a damaged cache);
- **not in the lock**: a requirement the lock does not pin (pyproject.toml changed: `make lock`).

For the first three it asks the index itself (its simple page for the package), since pip reports all
three as "No matching distribution found". Standard library only (``packaging``, when installed, judges
wheel tags): the Makefile runs it with the virtualenv's interpreter before anything else is installed.
"""

from __future__ import annotations

import html.parser
import os
import platform
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass

DEFAULT_INDEX = "https://pypi.org/simple"
SUPPORTED = "Linux x86-64 with CPython 3.11"
_NOT_FOUND = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)\s*(?:(==|===)\s*([^\s;,]+))?")
_HASH_HEADER = "THESE PACKAGES DO NOT MATCH THE HASHES"
_HASH_ENTRY = re.compile(r"^\s+([A-Za-z0-9._-]+)==(\S+) from (\S+)")
_MISSING_HASHES = "Hashes are required in --require-hashes mode, but they are missing"
_MISSING_ENTRY = re.compile(r"^\s+([A-Za-z0-9._-]+)==(\S+) --hash=")
_CONFLICT = ("ResolutionImpossible", "conflicting dependencies", "Cannot install")
_UNSUPPORTED_WHEEL = re.compile(r"(\S+\.whl) is not a supported wheel on this platform")


@dataclass(frozen=True)
class Diagnosis:
    package: str
    cause: str
    fix: str

    def render(self) -> str:
        return f"error: installing {self.package} failed: {self.cause}\n  fix: {self.fix}"


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.files.append(href.split("#", 1)[0].rsplit("/", 1)[-1])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def index_url(args: list[str], environ: dict[str, str]) -> str:
    """The index pip was told to use: ``--index-url``/``-i`` in the arguments, else PIP_INDEX_URL."""
    for i, arg in enumerate(args):
        if arg in ("--index-url", "-i") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--index-url="):
            return arg.split("=", 1)[1]
    return environ.get("PIP_INDEX_URL") or DEFAULT_INDEX


def index_files(index: str, package: str, timeout: float = 10.0) -> list[str] | None:
    """The file names the index lists for ``package``; [] when it does not know it, None when it cannot be
    reached."""
    url = f"{index.rstrip('/')}/{canonical(package)}/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return [] if exc.code == 404 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None
    parser = _Links()
    parser.feed(body)
    return parser.files


def _version_of(filename: str, package: str) -> str | None:
    """The version in a wheel or sdist file name of ``package``."""
    stem = re.sub(r"\.(whl|tar\.gz|zip|tar\.bz2)$", "", filename)
    prefix = re.sub(r"[-_.]+", "[-_.]+", re.escape(canonical(package)).replace("\\-", "-"))
    match = re.match(rf"(?i)^{prefix}-([^-]+)", stem)
    return match.group(1) if match else None


def wheel_fits(filename: str) -> bool:
    """Whether a wheel's tags fit this interpreter (any wheel counts when ``packaging`` is absent)."""
    try:
        from packaging.tags import sys_tags
        from packaging.utils import parse_wheel_filename
    except ImportError:
        return True
    _, _, _, tags = parse_wheel_filename(filename)
    return bool(set(tags) & set(sys_tags()))


def this_platform() -> str:
    return f"{platform.system()} {platform.machine()} with {platform.python_implementation()} " + ".".join(
        platform.python_version_tuple()[:2]
    )


def diagnose_not_found(package: str, version: str | None, index: str, files: list[str] | None) -> Diagnosis:
    """Why pip found no distribution, from what the index lists."""
    spec = f"{package}=={version}" if version else package
    if files is None:
        return Diagnosis(
            spec,
            f"the package index {index} cannot be reached",
            "check the network or proxy (HTTPS_PROXY), or point PIP_INDEX_URL at a reachable index or "
            "mirror of PyPI, then run the same make command again",
        )
    of_version = [f for f in files if version is None or _version_of(f, package) == version]
    if not of_version:
        return Diagnosis(
            spec,
            f"{index} has no file of {spec} (it lists {len(files)} files of other versions)"
            if files
            else f"{index} does not know {package}",
            "use PyPI or a complete mirror of it (PIP_INDEX_URL); a pin that PyPI does not carry at all "
            "means the lock is wrong: run `make lock` and review the change",
        )
    wheels = [f for f in of_version if f.endswith(".whl")]
    fitting = [f for f in wheels if wheel_fits(f)]
    if not wheels:
        return Diagnosis(
            spec,
            f"{spec} is published only as a source distribution, and this install compiles nothing",
            "a fault in Parley's install (the Makefile names the source-only packages it packs, with "
            "--no-binary): please report it with this output",
        )
    if not fitting:
        built = ", ".join(sorted({f.split("-", 2)[-1].removesuffix(".whl") for f in wheels})) or "none"
        return Diagnosis(
            spec,
            f"no wheel of {spec} fits this platform ({this_platform()}; wheels on the index: {built}) and "
            "nothing is compiled",
            f"run Parley on {SUPPORTED}, the platform its lock is made for (the docker image is one)",
        )
    return Diagnosis(
        spec,
        "pip found no installable file although the index lists one that fits (a pip option such as "
        "--only-binary, or a constraint, excluded it)",
        "read pip's messages above; if pyproject.toml changed, run `make lock`",
    )


def diagnose(output: str, args: list[str], environ: dict[str, str]) -> Diagnosis | None:
    """The failure in pip's output, or None when it is none of the known kinds."""
    lines = output.splitlines()
    if any(_HASH_HEADER in line for line in lines):
        bad = [m for line in lines if (m := _HASH_ENTRY.match(line))]
        name = ", ".join(f"{m.group(1)}=={m.group(2)}" for m in bad) or "a package"
        where = bad[0].group(3) if bad else "the index"
        return Diagnosis(
            name,
            f"the file downloaded from {where} does not have the sha256 that requirements.lock records",
            "if a proxy or mirror serves it, it serves other bytes than PyPI: use PyPI or fix the mirror; "
            "else clear pip's cache (`.venv/bin/pip cache purge`) and run the same make command again. "
            "Never edit a hash by hand: a changed pin comes from `make lock`",
        )
    if any(_MISSING_HASHES in line for line in lines):
        missing = [m for line in lines if (m := _MISSING_ENTRY.match(line))]
        name = ", ".join(f"{m.group(1)}=={m.group(2)}" for m in missing) or "a package"
        return Diagnosis(
            name,
            "it is not pinned in requirements.lock (a requirement was added to pyproject.toml, or a package "
            "declares a new dependency)",
            "run `make lock`, review the change of requirements.lock and commit it",
        )
    unsupported = next((m for line in lines if (m := _UNSUPPORTED_WHEEL.search(line))), None)
    if unsupported:
        return Diagnosis(
            unsupported.group(1),
            f"the wheel does not fit this platform ({this_platform()})",
            f"run Parley on {SUPPORTED}, the platform its lock is made for",
        )
    not_found = next((m for line in lines if (m := _NOT_FOUND.search(line))), None)
    if not_found:
        package, version = not_found.group(1), not_found.group(3)
        index = index_url(args, environ)
        return diagnose_not_found(package, version, index, index_files(index, package))
    if any(marker in output for marker in _CONFLICT):
        return Diagnosis(
            "the requirements",
            "they conflict with the versions pinned in requirements.lock",
            "run `make lock` (pyproject.toml changed since the lock was made), review and commit the change",
        )
    return None


def main(argv: list[str]) -> int:
    command = "install"
    if argv[:1] == ["--pip-command"]:
        command, argv = argv[1], argv[2:]
    cmd = [sys.executable, "-m", "pip", command, *argv]
    tail: deque[str] = deque(maxlen=400)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            tail.append(line)
        code = proc.wait()
    if code != 0:
        sys.stdout.flush()
        found = diagnose("".join(tail), argv, dict(os.environ))
        if found is not None:
            print(found.render(), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

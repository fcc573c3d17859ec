#!/usr/bin/env python3
"""Check the locked set (requirements.lock) against PyPI's published vulnerability data: `make audit`.

    python scripts/audit_lock.py [--lock requirements.lock] [--allowlist scripts/audit-allowlist.toml]

It audits the lock, not the running environment: exactly the versions every install gets. pip-audit asks
PyPI's vulnerability service (each release's JSON record, the PyPA advisory database's findings), so it
reaches the package registry only. A finding fails the check unless the allow-list accepts it, by its
id (or one of its aliases), with a reason. torch's CPU build (`2.13.0+cpu`) is audited as the release it
was built from. A package the service has no record for (not on PyPI, or the service unreachable) is
listed as not audited; with --strict that fails the check too.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


@dataclass(frozen=True)
class Finding:
    package: str
    version: str
    id: str
    aliases: tuple[str, ...]
    fix_versions: tuple[str, ...]


def audit_requirements(lock: Path) -> list[str]:
    """The lock's pins as `name==version` lines, local version labels dropped (torch's `+cpu`)."""
    out = []
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            out.append(f"{match.group(1)}=={match.group(2).split('+', 1)[0]}")
    return out


def load_allowlist(path: Path) -> dict[str, str]:
    """Accepted finding id -> reason; an entry without an id or a reason is an error, not a pass."""
    if not path.exists():
        return {}
    accepted = {}
    for entry in tomllib.loads(path.read_text()).get("accepted", []):
        if not entry.get("id") or not str(entry.get("reason", "")).strip():
            raise SystemExit(f"{path}: every [[accepted]] entry needs an id and a reason: {entry}")
        accepted[str(entry["id"])] = str(entry["reason"])
    return accepted


def parse_report(report: dict) -> tuple[list[Finding], list[str]]:
    """pip-audit's JSON report -> (findings, packages not audited with why)."""
    findings, skipped = [], []
    for dep in report.get("dependencies", []):
        if dep.get("skip_reason"):
            skipped.append(f"{dep['name']}: {dep['skip_reason']}")
            continue
        for vuln in dep.get("vulns", []):
            findings.append(
                Finding(
                    dep["name"],
                    dep.get("version", "?"),
                    vuln["id"],
                    tuple(vuln.get("aliases", [])),
                    tuple(vuln.get("fix_versions", [])),
                )
            )
    return findings, skipped


def judge(findings: list[Finding], accepted: dict[str, str]) -> tuple[list[Finding], list[Finding]]:
    """(unaccepted, accepted) findings: a finding is accepted when its id or an alias is allow-listed."""
    bad: list[Finding] = []
    ok: list[Finding] = []
    for finding in findings:
        (ok if {finding.id, *finding.aliases} & set(accepted) else bad).append(finding)
    return bad, ok


def run_pip_audit(requirements: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "locked.txt"
        req.write_text("\n".join(requirements) + "\n")
        out = Path(tmp) / "report.json"
        cmd = [
            sys.executable, "-m", "pip_audit", "-r", str(req), "--no-deps", "--disable-pip",
            "--vulnerability-service", "pypi", "--format", "json", "--output", str(out),
            "--progress-spinner", "off",
        ]  # fmt: skip
        # pip-audit exits 1 when it finds something: the report says what, so read it either way.
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not out.exists():
            raise SystemExit(f"pip-audit failed ({proc.returncode}):\n{proc.stderr}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements.lock")
    parser.add_argument("--allowlist", type=Path, default=ROOT / "scripts" / "audit-allowlist.toml")
    parser.add_argument("--report", type=Path, help="read this pip-audit JSON report instead of running it")
    parser.add_argument("--strict", action="store_true", help="a package that could not be audited fails too")
    args = parser.parse_args(argv)

    requirements = audit_requirements(args.lock)
    report = json.loads(args.report.read_text()) if args.report else run_pip_audit(requirements)
    findings, skipped = parse_report(report)
    accepted = load_allowlist(args.allowlist)
    bad, ok = judge(findings, accepted)
    audited = len(report.get("dependencies", [])) - len(skipped)
    print(
        f"{args.lock.name}: {len(requirements)} locked packages, "
        f"{audited} audited, {len(skipped)} not audited"
    )
    for finding in ok:
        reason = next(accepted[i] for i in (finding.id, *finding.aliases) if i in accepted)
        print(f"  accepted {finding.id} in {finding.package} {finding.version}: {reason}")
    for finding in bad:
        fix = ", ".join(finding.fix_versions) or "none published"
        print(f"  VULNERABLE {finding.package} {finding.version}: {finding.id} (fixed in {fix})")
    if skipped:
        shown = "; ".join(skipped[:5]) + (f"; … {len(skipped) - 5} more" if len(skipped) > 5 else "")
        print(f"  not audited: {shown}")
        if audited == 0:
            print(
                "  warning: the vulnerability data could not be read for any package "
                "(is PyPI's JSON API reachable?)"
            )
    if bad:
        print(
            f"{len(bad)} known vulnerabilities: upgrade the package (`make lock UPGRADE_PACKAGE=name`) "
            f"or accept the finding with a reason in {args.allowlist}"
        )
        return 1
    if skipped and args.strict:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The generated configuration reference (docs/configuration.md) covers every settings field.

The reference is produced by ``scripts/config_reference.py`` from the settings classes themselves; these
tests fail when a field was added (or changed) without regenerating it, and name what is missing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.settings import ParleySettings
from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "config_reference.py"


def _load_generator() -> ModuleType:
    return load_script("config_reference")


gen = _load_generator()


@pytest.fixture(scope="module")
def product_classes() -> list[type]:
    failed = gen.import_packages()
    assert not failed, f"modules that could not be imported (their settings would be missing): {failed}"
    return gen.settings_classes()


class _ProbeNested(ParleySettings):
    url: str | None = None
    token: SecretStr | None = None


class _ProbeSettings(ParleySettings):
    """A settings class the generator has never seen."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_PROBE_", frozen=True, env_nested_delimiter="__")

    retries: int = Field(default=3, ge=1, le=9, description="how often to try")
    password: SecretStr = SecretStr("hunter2")
    mode: str = Field(default="fast", validation_alias="PROBE_MODE")
    peer: _ProbeNested = Field(default_factory=_ProbeNested)


def test_every_settings_field_has_a_line_in_the_committed_reference(product_classes: list[type]) -> None:
    committed = gen.REFERENCE.read_text(encoding="utf-8")
    missing = gen.missing_rows(committed, product_classes)
    assert not missing, (
        "docs/configuration.md has no line for: "
        + ", ".join(f"{row.field} ({row.env})" for row in missing)
        + f"; run `{gen.GENERATE_COMMAND}` (or `make docs`) and commit docs/configuration.md"
    )


def test_committed_reference_equals_a_fresh_generation(product_classes: list[type]) -> None:
    committed = gen.REFERENCE.read_text(encoding="utf-8")
    assert committed == gen.generate(product_classes), (
        f"docs/configuration.md is out of date; run `{gen.GENERATE_COMMAND}` (or `make docs`) and commit it"
    )


def test_supplementary_descriptions_name_existing_fields(product_classes: list[type]) -> None:
    assert gen.stale_descriptions(product_classes) == [], "remove these keys from DESCRIPTIONS"


def test_the_known_processes_are_all_discovered(product_classes: list[type]) -> None:
    names = {cls.__name__ for cls in product_classes}
    expected = {
        "LLMSettings",
        "RetrieverClientSettings",
        "ApiSettings",
        "ClientSettings",
        "WorkerSettings",
        "RetrieverSettings",
        "EvalSettings",
    }
    assert expected <= names
    # Documented where it is nested (PARLEY_LLM_JUDGE__MODEL), not as a prefix-less class of its own.
    assert "EndpointOverride" not in names
    assert "ParleySettings" not in names


def test_a_new_settings_class_appears_without_editing_the_generator() -> None:
    classes = gen.settings_classes([__name__])
    assert _ProbeSettings in classes
    assert _ProbeNested not in classes  # only nested
    rows = {row.env: row for row in gen.rows_for(_ProbeSettings)}

    assert set(rows) == {
        "PARLEY_PROBE_RETRIES",
        "PARLEY_PROBE_PASSWORD",
        "PROBE_MODE",
        "PARLEY_PROBE_PEER",
    } | {
        "PARLEY_PROBE_PEER__URL",
        "PARLEY_PROBE_PEER__TOKEN",
    }
    assert rows["PARLEY_PROBE_RETRIES"].type == "int (≥ 1, ≤ 9)"
    assert rows["PARLEY_PROBE_RETRIES"].default == "`3`"
    assert rows["PARLEY_PROBE_RETRIES"].description == "how often to try"
    assert rows["PARLEY_PROBE_PEER__URL"].default == "unset"

    page = gen.generate([_ProbeSettings])
    assert "| `PARLEY_PROBE_RETRIES` | `int (≥ 1, ≤ 9)` | `3` | how often to try |" in page
    # A secret's default never reaches the page, nested or not.
    assert "hunter2" not in page
    assert rows["PARLEY_PROBE_PASSWORD"].default == "(secret)"
    assert rows["PARLEY_PROBE_PEER__TOKEN"].default == "(secret)"


def test_missing_rows_names_each_undocumented_variable() -> None:
    page = gen.generate([_ProbeSettings])
    without_two = "\n".join(
        line
        for line in page.splitlines()
        if "`PARLEY_PROBE_RETRIES`" not in line and "`PARLEY_PROBE_PEER__URL`" not in line
    )
    missing = gen.missing_rows(without_two, [_ProbeSettings])
    assert [(row.field, row.env) for row in missing] == [
        ("_ProbeSettings.retries", "PARLEY_PROBE_RETRIES"),
        ("_ProbeSettings.peer.url", "PARLEY_PROBE_PEER__URL"),
    ]


def test_product_secrets_show_no_default(product_classes: list[type]) -> None:
    page = gen.generate(product_classes)
    secret_lines = [line for line in page.splitlines() if line.startswith("| `") and "`SecretStr" in line]
    assert secret_lines, "expected the API keys of LLM, retriever and eval settings to be listed"
    assert all("| (secret) |" in line for line in secret_lines), secret_lines


@pytest.mark.integration  # runs scripts/config_reference.py --check as a subprocess
def test_check_command_passes_on_the_committed_reference() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


def test_every_compose_variable_is_documented() -> None:
    """docker-compose.yml's own variables (`${NAME:-default}`) have a row in the deployment docs."""
    compose = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", compose))
    page = (REPO / "docs" / "gateway-and-operations.md").read_text(encoding="utf-8")
    section = page.split("## Deploying with docker compose", 1)[-1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", section))
    missing = sorted(used - documented)
    assert not missing, (
        f"docker-compose.yml reads {missing} but the compose table of docs/gateway-and-operations.md "
        "('Deploying with docker compose') has no row for them"
    )

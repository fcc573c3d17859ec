"""deploy/prometheus and deploy/grafana: validated by promtool and against the metrics the code exports.

Grafana is not packaged for Debian, so its dashboard is checked by parsing: every metric a panel
queries must be one ``services.observability.metrics`` exports, or the panel would stay empty forever.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.observability.metrics import exported_names

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "parley.json"
METRIC = re.compile(r"\bparley_[a-z0-9_]+\b")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool is not installed (apt-get install -y --no-install-recommends prometheus)")
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=PROMETHEUS, timeout=60)


@pytest.mark.integration  # runs promtool as a subprocess
def test_promtool_accepts_the_scrape_config() -> None:
    proc = promtool("check", "config", "prometheus.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 rule files found" in proc.stdout


@pytest.mark.integration  # runs promtool as a subprocess
def test_promtool_accepts_the_alert_rules_and_they_fire_on_their_test_series() -> None:
    check = promtool("check", "rules", "alerts.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "4 rules found" in check.stdout
    # Unit tests of the rules: each alert fires on the series meant to trigger it (and not before).
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_scrape_config_covers_the_three_processes() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"parley-api", "parley-retriever", "parley-worker"}
    # The gateway's separate metrics port (ApiSettings.metrics_port), which compose binds on the
    # stack's network (not loopback) and never publishes.
    from api.settings import ApiSettings

    assert jobs["parley-api"]["static_configs"][0]["targets"] == [f"api:{ApiSettings().metrics_port}"]
    assert jobs["parley-retriever"]["static_configs"][0]["targets"] == ["retriever:8001"]
    # The worker's port is WorkerSettings.metrics_port's default.
    from debate_worker.worker_settings import WorkerSettings

    assert jobs["parley-worker"]["dns_sd_configs"][0]["port"] == WorkerSettings().metrics_port


def _alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [r for group in rules["groups"] for r in group["rules"]]


def test_alert_rules_cover_queue_failures_llm_errors_and_debate_time() -> None:
    names = {r["alert"] for r in _alert_rules()}
    assert names == {"ParleyQueueGrowing", "ParleyJobFailureRate", "ParleyLLMErrorRate", "ParleyDebateSlow"}
    for rule in _alert_rules():
        used = set(METRIC.findall(rule["expr"]))
        assert used and used <= exported_names(), (
            f"{rule['alert']} uses unknown metrics: {used - exported_names()}"
        )


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def test_dashboard_queries_only_metrics_the_code_exports() -> None:
    exported = exported_names()
    dashboard = _dashboard()
    assert dashboard["uid"] == "parley-overview" and dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "parley-prometheus"
            used = set(METRIC.findall(target["expr"]))
            assert used, f"panel {panel['title']!r} queries no Parley metric"
            assert used <= exported, f"panel {panel['title']!r} queries unknown metrics {used - exported}"


def test_dashboard_has_the_key_panels_and_no_overlaps() -> None:
    panels = {p["title"]: p for p in _dashboard()["panels"]}
    assert {"Queue depth", "Debate time p50 / p95", "Tokens by role"} <= set(panels)
    assert "parley_queue_depth" in panels["Queue depth"]["targets"][0]["expr"]
    assert "histogram_quantile(0.95" in json.dumps(panels["Debate time p50 / p95"]["targets"])
    cells: set[tuple[int, int]] = set()
    for panel in panels.values():
        pos = panel["gridPos"]
        mine = {
            (x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, f"panel {panel['title']!r} overlaps another"
        cells |= mine
    ids = [p["id"] for p in panels.values()]
    assert len(ids) == len(set(ids))


def test_grafana_provisioning_points_at_the_dashboard_and_the_prometheus_uid() -> None:
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert datasources["datasources"][0]["uid"] == "parley-prometheus"
    providers = yaml.safe_load((provisioning / "dashboards" / "parley.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.mark.integration  # runs docker-compose config as a subprocess
def test_compose_profile_observability_mounts_the_deploy_configs() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install -y docker-compose)")
    proc = subprocess.run(
        [binary, "-f", str(ROOT / "docker-compose.yml"), "--profile", "observability", "config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "GRAFANA_PASSWORD": "s3cret", "PARLEY_API_KEYS": "{}"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    assert services["prometheus"]["profiles"] == ["observability"]
    assert services["grafana"]["profiles"] == ["observability"]
    mounts = json.dumps(services["prometheus"]["volumes"]) + json.dumps(services["grafana"]["volumes"])
    assert "deploy/prometheus" in mounts and "deploy/grafana/dashboards" in mounts
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"

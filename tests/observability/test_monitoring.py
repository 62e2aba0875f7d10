"""The monitoring component and the Grafana dashboard: the manifests render with kustomize, the
PrometheusRule's groups pass ``promtool check rules`` and its alerts fire on the series they
should (``promtool test rules``), and the dashboard asks only for metrics /metrics exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.prometheus_server import in_ci, require_binary

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "deploy" / "kubernetes" / "components" / "monitoring"
DASHBOARD = ROOT / "deploy" / "grafana" / "gpu-ledger.json"
METRIC = re.compile(r"\bgpuledger_[a-z0-9_]+")


def rendered() -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if in_ci():
            pytest.fail("kubectl is not installed")
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(COMPONENT)], capture_output=True, text=True, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(kind: str) -> dict:
    (found,) = [doc for doc in rendered() if doc["kind"] == kind]
    return found


def test_the_component_is_a_kustomize_component():
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"


def test_the_service_monitor_scrapes_the_web_pods_with_the_token():
    monitor = by_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "gpu-ledger",
            "app.kubernetes.io/component": "web",
        }
    }
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/metrics"
    assert endpoint["bearerTokenSecret"] == {"name": "gpu-ledger-metrics", "key": "token"}


def rules_file(tmp_path: Path) -> Path:
    rule = by_kind("PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_the_rules_pass_promtool_check(tmp_path):
    promtool = require_binary("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", str(rules_file(tmp_path))], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 6 rules found" in result.stdout


def test_the_alerts_fire_on_the_series_they_watch(tmp_path):
    promtool = require_binary("promtool")
    rules = rules_file(tmp_path)
    lag = 'gpuledger_collection_lag_seconds{cluster="east",source="dcgm"}'
    behind = 'gpuledger_rollup_lag_seconds{cluster="east"}'
    failing = 'gpuledger_notification_failures{receiver_kind="slack",outcome="retrying"}'
    tests = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # Collection stops at minute 0: the lag grows 60 s a minute.
                    {"series": lag, "values": "0+60x30"},
                    # An hour stays due from minute 0, ended 50 minutes before.
                    {"series": behind, "values": "3000+60x40"},
                    {"series": failing, "values": "0x10 1x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "9m", "alertname": "GpuLedgerCollectionStale", "exp_alerts": []},
                    {
                        "eval_time": "13m",
                        "alertname": "GpuLedgerCollectionStale",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "cluster": "east",
                                    "source": "dcgm",
                                },
                                "exp_annotations": {
                                    "summary": "GPU Ledger: dcgm of cluster east is stale",
                                    # 13 minutes without collection: lag 780 s.
                                    "description": "The newest successful dcgm run of cluster "
                                    "east finished 13m 0s ago (more than 10 minutes). Pages show "
                                    "old figures; see the admin's ingest runs for the error.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "20m", "alertname": "GpuLedgerRollupBehind", "exp_alerts": []},
                    {
                        "eval_time": "32m",
                        "alertname": "GpuLedgerRollupBehind",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "cluster": "east"},
                                "exp_annotations": {
                                    "summary": "GPU Ledger: hourly rollups of cluster east are "
                                    "behind",
                                    # 3000 s + 32 minutes = 4920 s.
                                    "description": "The oldest hour of cluster east whose rollup "
                                    "is due ended 1h 22m 0s ago. Range figures (pages, chargeback) "
                                    "miss it.",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "20m",
                        "alertname": "GpuLedgerNotificationsFailing",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "27m",
                        "alertname": "GpuLedgerNotificationsFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "receiver_kind": "slack"},
                                "exp_annotations": {
                                    "summary": "GPU Ledger: slack notifications fail",
                                    "description": "1 slack deliveries failed their last try in "
                                    "the lookback window; the delivery log in the admin shows the "
                                    "errors.",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "rules_test.yml"
    test_file.write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def exposed_names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


@pytest.mark.django_db
def test_the_dashboard_asks_only_for_exposed_metrics(client, settings):
    settings.CELERY_BROKER_URL = "memory://"
    exposed = exposed_names(client.get("/metrics").content.decode())
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    expressions.append(variables["cluster"]["definition"])
    asked = {name for expr in expressions for name in METRIC.findall(expr)}
    assert len(expressions) >= 15
    assert asked - exposed == set()
    # Every panel reads the datasource the viewer picks.
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"


@pytest.mark.django_db
def test_the_dashboard_check_catches_an_unknown_metric(client, settings):
    settings.CELERY_BROKER_URL = "memory://"
    exposed = exposed_names(client.get("/metrics").content.decode())
    assert "gpuledger_team_allocated_gpus" in exposed
    assert set(METRIC.findall("sum(gpuledger_no_such_thing)")) - exposed == {
        "gpuledger_no_such_thing"
    }


def test_the_dashboard_queries_are_valid_promql(tmp_path):
    # promtool parses every expression of a rule file: the dashboard's queries, as recording
    # rules, are checked the same way (Grafana's "$cluster" sits inside a label matcher string).
    promtool = require_binary("promtool")
    dashboard = json.loads(DASHBOARD.read_text())
    rules = [
        {"record": f"dashboard:query_{n}", "expr": target["expr"]}
        for n, target in enumerate(
            target for panel in dashboard["panels"] for target in panel.get("targets", [])
        )
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout

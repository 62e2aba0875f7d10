"""A real Prometheus scrapes /metrics of a live test server with the bearer token, and the test
asks Prometheus for the series it stored."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from fleet.models import Cluster
from tests.pages.conftest import build_fleet
from tests.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration

TOKEN = "scrape-token-" + "q" * 30


def scrape_config(address: str) -> str:
    """Two jobs on the same target: the right token, and a wrong one that must be refused."""
    jobs = []
    for job, token in (("gpu-ledger", TOKEN), ("wrong-token", TOKEN + "-wrong")):
        jobs += [
            f"  - job_name: {job}",
            "    metrics_path: /metrics",
            "    authorization:",
            "      type: Bearer",
            f"      credentials: {token}",
            "    static_configs:",
            f"      - targets: ['{address}']",
        ]
    return "\n".join(
        ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:", *jobs, ""]
    )


def instant(server: PrometheusServer, promql: str) -> list[dict]:
    answer = requests.get(f"{server.url}/api/v1/query", params={"query": promql}, timeout=5)
    answer.raise_for_status()
    return answer.json()["data"]["result"]


def test_prometheus_scrapes_the_metrics_with_the_token(
    live_server, transactional_db, settings, django_user_model, tmp_path: Path
):
    settings.GPULEDGER_METRICS_TOKEN = TOKEN
    settings.CELERY_BROKER_URL = "memory://"
    cluster = Cluster.objects.create(name="test", prometheus_url="http://127.0.0.1:9/")
    lead = django_user_model.objects.create_user("lead-a", password="pw-lead-12345")
    build_fleet(cluster, lead)

    server = PrometheusServer(tmp_path / "tsdb")
    server.config_file.write_text(scrape_config(live_server.url.removeprefix("http://")))
    with server:
        server.wait_for_series('gpuledger_team_allocated_gpus{team="beta"}', timeout=40)
        server.wait_for_series('up{job="wrong-token"} == 0', timeout=20)

        beta = instant(server, 'gpuledger_team_allocated_gpus{job="gpu-ledger",team="beta"}')
        assert [float(row["value"][1]) for row in beta] == [5.0]
        capacity = instant(server, 'gpuledger_cluster_capacity_gpus{cluster="test"}')
        assert [float(row["value"][1]) for row in capacity] == [pytest.approx(8.0)]
        lag = instant(server, 'gpuledger_collection_lag_seconds{source="dcgm"}')
        assert len(lag) == 1 and 0 <= float(lag[0]["value"][1]) < 300
        assert [row["value"][1] for row in instant(server, 'up{job="gpu-ledger"}')] == ["1"]
        # The refused job stored nothing of ours.
        assert instant(server, '{job="wrong-token", __name__=~"gpuledger_.*"}') == []

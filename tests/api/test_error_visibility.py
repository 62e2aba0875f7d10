"""An ingest error names internal hosts and paths: staff see it in full, other users a summary."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from fleet.models import Cluster, IngestRun

ERROR = (
    "PrometheusError: HTTPConnectionPool(host='prom.corp.internal', port=9090): Max retries "
    "exceeded (/srv/gpuledger/ca.pem)"
)


@pytest.fixture
def failed_run(scenario):
    cluster = (
        Cluster.objects.get(name="c1")
        if Cluster.objects.filter(name="c1").exists()
        else (Cluster.objects.first())
    )
    return IngestRun.objects.create(
        cluster=cluster,
        source="dcgm",
        status="failed",
        started_at=datetime.now(UTC),
        error=ERROR,
    )


def errors(client):
    body = client.get("/api/v1/ingest-runs/", {"status": "failed"}).json()
    return [row["error"] for row in body["results"]]


def test_staff_read_the_full_error(staff_client, failed_run):
    assert errors(staff_client) == [ERROR]


def test_a_team_lead_reads_a_summary_without_hosts_or_paths(lead_client, failed_run):
    [summary] = errors(lead_client)

    assert summary.startswith("PrometheusError: HTTPConnectionPool(host=<host>, port=<port>)")
    assert "prom.corp.internal" not in summary
    assert "9090" not in summary
    assert "/srv/gpuledger" not in summary


@pytest.mark.parametrize(("user_fixture", "shown"), [("staff", True), ("lead", False)])
def test_the_freshness_banner_follows_the_same_rule(request, failed_run, user_fixture, shown):
    client = Client()
    client.force_login(request.getfixturevalue(user_fixture))

    page = client.get("/").content.decode()

    assert "Failing:" in page
    assert ("prom.corp.internal" in page) is shown
    assert ("HTTPConnectionPool(host=&lt;host&gt;, port=&lt;port&gt;)" in page) is not shown

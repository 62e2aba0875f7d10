"""A ``serving_overprovisioned`` episode, written by the rule from stored serving hours, in a real
Prometheus Alertmanager on loopback (Debian's prometheus-alertmanager; with CI=true a missing
binary fails the test, elsewhere it skips it)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.utils import timezone

from alerts.choices import Rule
from alerts.models import Episode
from alerts.overprovisioned import evaluate_serving
from core.deadlines import Deadline
from core.timewindows import floor_time
from fleet.models import Cluster
from notifications.models import Receiver, Route
from notifications.notify import run_notifications
from quotas.models import Team, TeamNamespace
from serving.models import ServingWorkload
from tests.alerts.serving_days import DAY, HOUR, write_day

pytestmark = pytest.mark.django_db


def test_an_over_provisioned_deployment_fires_in_alertmanager_with_its_labels(
    alertmanager, webhook_server, settings
):
    settings.GPULEDGER_BASE_URL = "https://ledger.example.test"
    settings.GPULEDGER_NOTIFY_LOOKBACK_HOURS = 24 * 7
    settings.GPULEDGER_ALERT_SERVING_DAYS = 2
    cluster = Cluster.objects.create(name="east", display_name="East")
    team = Team.objects.create(name="serving")
    TeamNamespace.objects.create(team=team, cluster=cluster, namespace="ml-serving")
    qwen = ServingWorkload.objects.create(
        cluster=cluster, namespace="ml-serving", kind="Deployment", name="vllm-qwen-chat"
    )
    today: datetime = floor_time(timezone.now(), int(DAY.total_seconds()))
    write_day(qwen, today - 4 * DAY, per_replica=900.0)  # the knee, within the defaults
    write_day(qwen, today - 3 * DAY, per_replica=100.0)
    write_day(qwen, today - 2 * DAY, per_replica=100.0)
    am = Receiver.objects.create(name="am", kind="alertmanager", targets=alertmanager.url)
    Route.objects.create(receiver=am, rules=[Rule.SERVING_OVERPROVISIONED])
    hook = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)
    Route.objects.create(receiver=hook, rules=[Rule.SERVING_OVERPROVISIONED])

    evaluate_serving(today + 2 * HOUR)
    run_notifications(timezone.now(), Deadline(30, "test deadline"))

    episode = Episode.objects.get()
    assert episode.fired_at == today - DAY and episode.resolved_at is None
    [alert] = alertmanager.alerts()
    assert alert["labels"] == {
        "alertname": "GpuServingOverprovisioned",
        "severity": "warning",
        "cluster": "east",
        "team": "serving",
        "namespace": "ml-serving",
        "workload": "vllm-qwen-chat",
        "workload_kind": "Deployment",
    }
    assert alert["annotations"]["summary"].startswith(
        "Serving ml-serving/Deployment/vllm-qwen-chat: below 50% of its knee (900 output tokens/s"
    )
    assert (
        "Serving deployment: ml-serving/Deployment/vllm-qwen-chat"
        in (alert["annotations"]["description"])
    )
    assert alert["generatorURL"] == f"https://ledger.example.test/alerts/{episode.pk}/"
    [fired] = [json.loads(request.body) for request in webhook_server.received]
    assert fired["event"] == "fired"
    assert fired["episode"]["serving_workload"] == "ml-serving/Deployment/vllm-qwen-chat"
    assert fired["episode"]["workload"] is None

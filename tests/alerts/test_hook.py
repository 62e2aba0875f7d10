"""The collector's windows_collected signal queues the evaluation of the rules, live and on
backfill, through the real collection path (a real Prometheus with the generated alpha fleet):
nothing is evaluated while the collector writes, the task evaluates once the windows commit."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings

from alerts.choices import Rule
from alerts.models import AlertEvaluation, Episode
from alerts.tasks import request_evaluation
from fleet import constants as c
from fleet.choices import IngestSource
from fleet.models import Cluster, CollectionCursor
from ledger.collector import Collector
from ledger.models import GpuUsage
from ledger.signals import windows_collected
from tests.fleet.conftest import T0, WINDOW_SECONDS

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

# alpha's pod team-c/lost-0 holds 2 GPUs whose series lost their pod labels: allocated without
# telemetry for the whole two hours, on a node whose exporter works (tests/fleet/conftest.py).
LOST = "pod:{cluster}/team-c/lost-0"


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.GPULEDGER_CATCHUP_HOURS = 24


def test_a_live_run_queues_its_windows_and_the_task_evaluates_them_after_commit(
    alpha_prometheus, eager_celery, django_capture_on_commit_callbacks
):
    cluster = Cluster.objects.create(name="alpha-live", prometheus_url=alpha_prometheus.url)
    CollectionCursor.objects.create(cluster=cluster, source=IngestSource.DCGM, last_window_end=T0)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        # A run 30 minutes in collects windows (T0, T0 + 30 min].
        Collector(cluster).run(now=T0 + timedelta(minutes=30, seconds=c.COLLECT_DELAY_SECONDS + 1))
        # Written, not evaluated: the evaluation waits for the commit.
        assert GpuUsage.objects.filter(cluster=cluster).exists()
        assert not Episode.objects.filter(cluster=cluster).exists()
    # One evaluation request, whatever else the write registered (new partitions' bookkeeping).
    requested = [getattr(callback, "func", None) for callback in callbacks]
    assert requested.count(request_evaluation) == 1
    [episode] = Episode.objects.filter(cluster=cluster, rule=Rule.TELEMETRY_MISSING)
    assert episode.subject_key == LOST.format(cluster="alpha-live")
    assert (episode.started_at, episode.fired_at, episode.resolved_at) == (
        T0,
        T0 + timedelta(minutes=10),
        None,
    )
    assert episode.gpus == 2 and episode.detected_live


def test_the_backfill_command_leaves_the_episodes_of_that_history(
    alpha_prometheus, eager_celery, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        _backfill(alpha_prometheus)
    cluster = Cluster.objects.get(name="alpha-back")
    [episode] = Episode.objects.filter(cluster=cluster, rule=Rule.TELEMETRY_MISSING)
    assert episode.subject_key == LOST.format(cluster="alpha-back")
    assert (episode.started_at, episode.fired_at) == (T0, T0 + timedelta(minutes=10))
    assert episode.detected_live is False
    assert episode.held_seconds == 2 * 3600
    # alpha's single NaN sample never makes a telemetry episode.
    assert not Episode.objects.filter(cluster=cluster, subject_key__contains="nanjob").exists()
    # Evaluating the same history again changes nothing.
    before = list(Episode.objects.values_list("pk", "updated_at", "held_seconds"))
    call_command(
        "evaluate_alerts",
        "--cluster",
        "alpha-back",
        "--start",
        T0.isoformat(),
        "--end",
        (T0 + timedelta(hours=2)).isoformat(),
        stdout=StringIO(),
    )
    assert list(Episode.objects.values_list("pk", "updated_at", "held_seconds")) == before


def test_a_backfill_queues_one_evaluation_not_one_per_window(
    alpha_prometheus, django_capture_on_commit_callbacks, monkeypatch
):
    published = []
    monkeypatch.setattr(
        "alerts.tasks.evaluate_alerts.apply_async", lambda **kw: published.append(kw["args"])
    )
    with django_capture_on_commit_callbacks(execute=True):
        _backfill(alpha_prometheus)
    cluster = Cluster.objects.get(name="alpha-back")
    # 120 windows collected; no worker took the first task, so later requests joined it.
    assert len(published) == 1
    waiting = AlertEvaluation.objects.get(cluster=cluster)
    assert (waiting.pending_start, waiting.pending_end, waiting.pending_live) == (
        T0,
        T0 + timedelta(hours=2),
        False,
    )
    assert not Episode.objects.filter(cluster=cluster).exists()


def test_nothing_is_queued_when_the_windows_roll_back(django_capture_on_commit_callbacks):
    cluster = Cluster.objects.create(name="rolled-back")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            windows_collected.send(
                sender=None, cluster_id=cluster.pk, start=T0, end=T0 + timedelta(hours=1), live=True
            )
            raise RuntimeError("the write failed")
    assert callbacks == []
    assert not AlertEvaluation.objects.filter(cluster=cluster).exists()


def _backfill(alpha_prometheus) -> None:
    # A retention that reaches this history keeps it on the per-window path (the one that
    # evaluates alerts); older hours would be deep-backfilled into hourly rollups only.
    with override_settings(GPULEDGER_USAGE_RETENTION_DAYS=36500):
        _collect(alpha_prometheus)


def _collect(alpha_prometheus) -> None:
    call_command(
        "collect_metrics",
        "--cluster",
        "alpha-back",
        "--prometheus-url",
        alpha_prometheus.url,
        "--start",
        T0.isoformat(),
        "--end",
        (T0 + timedelta(hours=2)).isoformat(),
        "--no-progress",
        stdout=StringIO(),
    )


@pytest.mark.django_db
@pytest.mark.postgresql(reason="fillfactor is a PostgreSQL storage parameter")
def test_the_episode_table_keeps_room_for_hot_updates_after_migrate():
    from django.db import connection

    from alerts.hooks import EPISODE_FILLFACTOR

    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'alerts_episode'")
        assert cursor.fetchone()[0] == [f"fillfactor={EPISODE_FILLFACTOR}"]

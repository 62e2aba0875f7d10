"""What /metrics says, against a fleet whose figures are worked out by hand
(tests/pages/conftest.py ``build_fleet``) and bookkeeping rows written here."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from alerts.choices import Rule, Severity
from alerts.models import Episode
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, IngestRun
from ledger.choices import RollupScope
from ledger.models import HourlyRollup, PruneRun, RollupHour
from ledger.tasks import prune_usage
from notifications.choices import DeliveryEvent, DeliveryOutcome, ReceiverKind
from notifications.models import Delivery, Receiver
from observability.broker import PRIORITY_SEPARATOR
from observability.exposition import PARTS
from observability.health import failure_reason
from quotas.models import ClusterQueue, Team
from tests.observability.conftest import labelled, names, value
from tests.pages.conftest import ROLLUP_HOURS, build_fleet
from tests.prometheus_server import in_ci

pytestmark = pytest.mark.django_db

# The test settings' broker (the tests' own Redis database), before the fixture below hides it.
REDIS_BROKER = settings.CELERY_BROKER_URL


@pytest.fixture(autouse=True)
def _no_broker(settings):
    settings.CELERY_BROKER_URL = "memory://"


@pytest.fixture
def fleet(cluster, django_user_model):
    cluster.prometheus_url = "http://127.0.0.1:9/"
    cluster.save()
    lead = django_user_model.objects.create_user("lead-a", password="pw-lead-12345")
    return build_fleet(cluster, lead)


# --- Figures -----------------------------------------------------------------------------------


def test_gpus_now_per_cluster_team_and_queue_are_the_newest_windows(fleet, scrape):
    series = scrape()
    # The newest window, row by row: alpha holds a0 (busy), a1 (idle: 0.005 < 0.01) and 3/7
    # of a MIG GPU; beta holds a time-sliced GPU (2 x 0.5), b0 (no telemetry: never idle), b2
    # and two GPUs with no DCGM series. Physical: 7 whole GPUs and 3/7 + 4/7 of one MIG GPU.
    alpha, beta = 2 + 3 / 7, 5.0
    assert value(series, "gpuledger_cluster_capacity_gpus", cluster="test") == pytest.approx(8.0)
    assert value(series, "gpuledger_cluster_allocated_gpus", cluster="test") == pytest.approx(
        alpha + beta
    )
    assert value(series, "gpuledger_cluster_idle_gpus", cluster="test") == pytest.approx(1.0)
    for metric, label in (("team", "team"), ("cluster_queue", "cluster_queue")):
        alpha_name = "alpha" if metric == "team" else fleet.cq_a.name
        beta_name = "beta" if metric == "team" else fleet.cq_b.name
        allocated = labelled(series, f"gpuledger_{metric}_allocated_gpus")
        assert allocated == pytest.approx(
            {
                frozenset({("cluster", "test"), (label, alpha_name)}): alpha,
                frozenset({("cluster", "test"), (label, beta_name)}): beta,
            }
        )
        assert value(
            series, f"gpuledger_{metric}_idle_gpus", cluster="test", **{label: alpha_name}
        ) == pytest.approx(1.0)
        assert value(
            series, f"gpuledger_{metric}_idle_gpus", cluster="test", **{label: beta_name}
        ) == pytest.approx(0.0)
    assert value(
        series, "gpuledger_figures_window_end_timestamp_seconds", cluster="test"
    ) == pytest.approx(fleet.now.timestamp())


def test_active_gpu_hours_are_the_last_complete_hours_rollup(fleet, scrape):
    series = scrape()
    # The fixture's team rollups: active = 2.0 (alpha) / 0.5 (beta) + n/100 in its n-th hour;
    # the last complete hour is the last of ROLLUP_HOURS.
    assert value(
        series, "gpuledger_team_active_gpu_hours", cluster="test", team="alpha"
    ) == pytest.approx(2.0 + ROLLUP_HOURS / 100)
    assert value(
        series, "gpuledger_team_active_gpu_hours", cluster="test", team="beta"
    ) == pytest.approx(0.5 + ROLLUP_HOURS / 100)


def test_a_queue_with_rollups_but_nothing_held_now_still_has_its_hour(fleet, scrape):
    idle_queue = ClusterQueue.objects.create(cluster=fleet.cluster, name="gamma")
    HourlyRollup.objects.create(
        cluster=fleet.cluster,
        scope=RollupScope.CLUSTER_QUEUE,
        key="gamma",
        hour=fleet.complete_hours[-1],
        cluster_queue=idle_queue,
        allocated_gpu_hours=4.0,
        active_gpu_hours=1.25,
        windows=60,
    )
    series = scrape()
    assert value(
        series, "gpuledger_cluster_queue_active_gpu_hours", cluster="test", cluster_queue="gamma"
    ) == pytest.approx(1.25)
    assert value(
        series, "gpuledger_cluster_queue_allocated_gpus", cluster="test", cluster_queue="gamma"
    ) == pytest.approx(0.0)


def test_teams_past_the_cap_are_summed_as_other(fleet, scrape, settings):
    settings.GPULEDGER_METRICS_MAX_TEAMS = 1
    series = scrape()
    # beta holds more GPUs now (5 against 2 3/7), so it keeps its label.
    allocated = labelled(series, "gpuledger_team_allocated_gpus")
    assert allocated == pytest.approx(
        {
            frozenset({("cluster", "test"), ("team", "beta")}): 5.0,
            frozenset({("cluster", "test"), ("team", "(other)")}): 2 + 3 / 7,
        }
    )
    assert value(
        series, "gpuledger_team_active_gpu_hours", cluster="test", team="(other)"
    ) == pytest.approx(2.0 + ROLLUP_HOURS / 100)


def test_label_count_stays_bounded_with_many_teams(cluster, scrape, settings):
    settings.GPULEDGER_METRICS_MAX_TEAMS = 5
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    teams = Team.objects.bulk_create([Team(name=f"team-{n:03}") for n in range(40)])
    HourlyRollup.objects.bulk_create(
        HourlyRollup(
            cluster=cluster,
            scope=RollupScope.TEAM,
            key=team.name,
            hour=hour,
            team=team,
            active_gpu_hours=float(n),
            windows=60,
        )
        for n, team in enumerate(teams)
    )
    active = labelled(scrape(), "gpuledger_team_active_gpu_hours")
    assert len(active) == 6
    kept = {dict(labels)["team"] for labels in active}
    assert kept == {"team-039", "team-038", "team-037", "team-036", "team-035", "(other)"}
    assert sum(active.values()) == pytest.approx(sum(range(40)))


# --- Health ------------------------------------------------------------------------------------


def test_collection_lag_is_the_time_since_the_newest_successful_run(fleet, scrape):
    IngestRun.objects.create(
        cluster=fleet.cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.SUCCESS,
        started_at=timezone.now() - timedelta(minutes=20),
        finished_at=timezone.now() - timedelta(minutes=15),
    )
    IngestRun.objects.create(
        cluster=fleet.cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.FAILED,
        started_at=timezone.now() - timedelta(minutes=5),
        finished_at=timezone.now() - timedelta(minutes=4),
        error="KubeTimeout: the sync deadline (GPULEDGER_SYNC_DEADLINE_SECONDS) passed",
    )
    series = scrape()
    # The fixture's DCGM run finished 5 s before it returned.
    dcgm = value(series, "gpuledger_collection_lag_seconds", cluster="test", source="dcgm")
    assert 0 <= dcgm < 120
    kueue = value(series, "gpuledger_collection_lag_seconds", cluster="test", source="kueue")
    assert 15 * 60 <= kueue < 17 * 60
    assert value(series, "gpuledger_collection_failing", cluster="test", source="kueue") == 1
    assert value(series, "gpuledger_collection_failing", cluster="test", source="dcgm") == 0


def test_a_source_that_never_succeeded_is_infinitely_late_and_a_disabled_one_is_absent(
    cluster, scrape
):
    other = Cluster.objects.create(name="off", sync_enabled=False)
    for target in (cluster, other):
        IngestRun.objects.create(
            cluster=target,
            source=IngestSource.KUEUE,
            status=IngestStatus.FAILED,
            started_at=timezone.now() - timedelta(minutes=1),
            finished_at=timezone.now(),
            error="KubeError: 403 Forbidden",
        )
    series = scrape()
    lag = value(series, "gpuledger_collection_lag_seconds", cluster="test", source="kueue")
    assert lag == float("inf")
    assert ("off", "kueue") not in {
        (dict(labels)["cluster"], dict(labels)["source"])
        for labels in labelled(series, "gpuledger_collection_lag_seconds")
    }


def test_runs_durations_and_failures_by_reason_cover_the_lookback(cluster, scrape, settings):
    settings.GPULEDGER_METRICS_LOOKBACK_SECONDS = 3600
    now = timezone.now()

    def run(minutes_ago: float, seconds: float, status: str, error: str = "") -> None:
        started = now - timedelta(minutes=minutes_ago)
        IngestRun.objects.create(
            cluster=cluster,
            source=IngestSource.DCGM,
            status=status,
            started_at=started,
            finished_at=started + timedelta(seconds=seconds),
            error=error,
        )

    run(10, 2.0, IngestStatus.SUCCESS)
    run(9, 4.0, IngestStatus.SUCCESS)
    run(8, 30.0, IngestStatus.FAILED, "PrometheusError: read timed out after 30 s")
    run(7, 1.0, IngestStatus.FAILED, "PrometheusError: HTTP 503 from http://prom:9090")
    run(6, 1.0, IngestStatus.FAILED, "PrometheusError: HTTP 502 Bad Gateway")
    run(120, 99.0, IngestStatus.FAILED, "PrometheusError: HTTP 500")  # before the lookback
    series = scrape()
    assert value(series, "gpuledger_runs", cluster="test", source="dcgm", status="success") == 2
    assert value(series, "gpuledger_runs", cluster="test", source="dcgm", status="failed") == 3
    assert value(
        series, "gpuledger_run_duration_max_seconds", cluster="test", source="dcgm"
    ) == pytest.approx(30.0)
    assert value(
        series, "gpuledger_run_duration_mean_seconds", cluster="test", source="dcgm"
    ) == pytest.approx((2 + 4 + 30 + 1 + 1) / 5)
    assert labelled(series, "gpuledger_run_failures") == {
        frozenset({("cluster", "test"), ("source", "dcgm"), ("reason", "timeout")}): 1,
        frozenset({("cluster", "test"), ("source", "dcgm"), ("reason", "server_error")}): 2,
    }


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("ClaimLostError: collector-2", "lease_lost"),
        ("KubeTimeout: the sync deadline passed", "timeout"),
        ("PrometheusError: cannot connect: Connection refused", "connection"),
        ("Workload LIST: 403 Forbidden", "unauthorized"),
        ("PrometheusError: HTTP 422: bad_data", "client_error"),
        ("OperationalError: database is locked", "database"),
        ("PrometheusError: the answer cannot be decoded", "bad_answer"),
        ("ZeroDivisionError: division by zero", "other"),
    ],
)
def test_a_failure_reason_is_one_of_a_few(error, reason):
    assert failure_reason(error) == reason


def test_sync_relists_count_each_sync_and_each_gone_watch(cluster, scrape):
    now = timezone.now()
    for minutes, notes in ((30, {"Workload: relisted after 410 Gone": 2}), (10, {})):
        IngestRun.objects.create(
            cluster=cluster,
            source=IngestSource.KUEUE,
            status=IngestStatus.SUCCESS,
            started_at=now - timedelta(minutes=minutes),
            finished_at=now - timedelta(minutes=minutes - 5),
            skip_reasons={**notes, "Pod: relisted after 410 Gone": 1, "Cohort: not served": 1},
        )
    series = scrape()
    assert value(series, "gpuledger_sync_relists", cluster="test", cause="scheduled") == 2
    assert value(series, "gpuledger_sync_relists", cluster="test", cause="gone") == 4


def test_rollup_lag_is_the_age_of_the_oldest_due_hour(cluster, scrape):
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    RollupHour.objects.create(cluster=cluster, hour=hour - timedelta(hours=3), changes=60)
    RollupHour.objects.create(
        cluster=cluster,
        hour=hour - timedelta(hours=2),
        changes=60,
        rolled_changes=60,
        rolled_up_at=now,
    )
    RollupHour.objects.create(cluster=cluster, hour=hour - timedelta(hours=1), changes=5)
    # The hour in progress is dirty by design: it is not behind.
    RollupHour.objects.create(cluster=cluster, hour=hour, changes=3)
    series = scrape()
    # The oldest due hour ended two hours before the current hour began.
    expected = (now - (hour - timedelta(hours=2))).total_seconds()
    assert value(series, "gpuledger_rollup_lag_seconds", cluster="test") == pytest.approx(
        expected, abs=5
    )
    assert value(series, "gpuledger_rollup_hours_due", cluster="test") == 2


def test_a_cluster_with_nothing_due_has_no_rollup_lag(cluster, scrape):
    assert value(scrape(), "gpuledger_rollup_lag_seconds", cluster="test") == 0


def test_the_prune_task_records_its_duration_and_outcome(cluster, scrape):
    assert "gpuledger_prune_duration_seconds" not in {name for name, _ in scrape()}
    before = timezone.now()
    prune_usage()
    series = scrape()
    record = PruneRun.objects.get()
    assert record.succeeded
    assert record.rows_deleted == {"usage": 0, "rollups": 0, "ingest_runs": 0}
    assert value(series, "gpuledger_prune_failed") == 0
    assert 0 <= value(series, "gpuledger_prune_duration_seconds") < 60
    assert value(series, "gpuledger_prune_last_success_timestamp_seconds") >= before.timestamp()


def test_a_failed_prune_is_reported(cluster, scrape, monkeypatch):
    from ledger import rollup

    def broken(before):
        raise RuntimeError("disk full")

    monkeypatch.setattr(rollup, "prune_usage", broken)
    with pytest.raises(RuntimeError):
        prune_usage()
    record = PruneRun.objects.get()
    assert not record.succeeded and "disk full" in record.error
    assert value(scrape(), "gpuledger_prune_failed") == 1


def test_open_episodes_count_by_rule_and_severity(cluster, scrape):
    now = timezone.now()

    def episode(key: str, rule: str, severity: str, *, fired=True, resolved=False) -> None:
        Episode.objects.create(
            cluster=cluster,
            rule=rule,
            severity=severity,
            subject_key=key,
            started_at=now - timedelta(hours=2),
            fired_at=now - timedelta(hours=1) if fired else None,
            resolved_at=now if resolved else None,
            evaluated_until=now,
        )

    episode("w1", Rule.IDLE_WORKLOAD, Severity.WARNING)
    episode("w2", Rule.IDLE_WORKLOAD, Severity.WARNING)
    episode("w3", Rule.IDLE_WORKLOAD, Severity.CRITICAL)
    episode("w4", Rule.IDLE_WORKLOAD, Severity.CRITICAL, resolved=True)
    episode("w5", Rule.GHOST_RESERVATION, Severity.WARNING, fired=False)  # still pending
    assert labelled(scrape(), "gpuledger_alert_episodes_open") == {
        frozenset({("cluster", "test"), ("rule", "idle_workload"), ("severity", "warning")}): 2,
        frozenset({("cluster", "test"), ("rule", "idle_workload"), ("severity", "critical")}): 1,
    }


def test_notification_outbox_and_failures(cluster, scrape):
    now = timezone.now()
    episode = Episode.objects.create(
        cluster=cluster,
        rule=Rule.IDLE_WORKLOAD,
        severity=Severity.WARNING,
        subject_key="w1",
        started_at=now - timedelta(hours=2),
        fired_at=now - timedelta(hours=1),
        evaluated_until=now,
    )
    hook = Receiver.objects.create(name="hook", kind=ReceiverKind.WEBHOOK)
    slack = Receiver.objects.create(name="chat", kind=ReceiverKind.SLACK)
    for sequence, (receiver, outcome) in enumerate(
        [
            (hook, DeliveryOutcome.PENDING),
            (hook, DeliveryOutcome.RETRYING),
            (slack, DeliveryOutcome.FAILED),
            (slack, DeliveryOutcome.SENT),
        ]
    ):
        Delivery.objects.create(
            episode=episode,
            receiver=receiver,
            event=DeliveryEvent.FIRED,
            sequence=sequence,
            severity=Severity.WARNING,
            outcome=outcome,
        )
    series = scrape()
    assert labelled(series, "gpuledger_notification_outbox") == {
        frozenset({("receiver_kind", "webhook"), ("outcome", "pending")}): 1,
        frozenset({("receiver_kind", "webhook"), ("outcome", "retrying")}): 1,
    }
    assert labelled(series, "gpuledger_notification_failures") == {
        frozenset({("receiver_kind", "webhook"), ("outcome", "retrying")}): 1,
        frozenset({("receiver_kind", "slack"), ("outcome", "failed")}): 1,
    }


# --- Broker ------------------------------------------------------------------------------------


def test_an_absent_broker_is_broker_up_0_and_the_rest_is_answered(fleet, scrape, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    series = scrape()
    assert value(series, "gpuledger_broker_up") == 0
    assert labelled(series, "gpuledger_celery_queue_length") == {}
    assert value(series, "gpuledger_metrics_scrape_errors", part="broker") == 0
    assert value(series, "gpuledger_cluster_capacity_gpus", cluster="test") == pytest.approx(8.0)


@pytest.mark.integration
def test_queue_lengths_are_read_from_redis_across_priorities(cluster, scrape, settings):
    url = REDIS_BROKER
    settings.CELERY_BROKER_URL = url
    settings.GPULEDGER_CLUSTER_QUEUES = ["test"]
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        if in_ci():
            pytest.fail(f"no Redis at {url}: {exc}")
        pytest.skip(f"no Redis at {url}: {exc}")
    keys = ["celery", f"celery{PRIORITY_SEPARATOR}3", "cluster.test"]
    client.delete(*keys)
    try:
        client.rpush("celery", "a", "b", "c")
        client.rpush(f"celery{PRIORITY_SEPARATOR}3", "d")
        client.rpush("cluster.test", "e", "f")
        series = scrape()
    finally:
        client.delete(*keys)
        client.close()
    assert value(series, "gpuledger_broker_up") == 1
    assert labelled(series, "gpuledger_celery_queue_length") == {
        frozenset({("queue", "celery")}): 4,
        frozenset({("queue", "cluster.test")}): 2,
    }


def test_every_part_is_read_without_error(fleet, scrape):
    series = scrape()
    errors = labelled(series, "gpuledger_metrics_scrape_errors")
    assert set(errors.values()) == {0}
    assert len(errors) == 8


def test_a_part_that_cannot_be_read_is_counted_and_the_rest_answered(
    fleet, scrape, monkeypatch, caplog
):
    def unreadable(now):
        raise DatabaseError("relation ledger_rolluphour does not exist")

    monkeypatch.setitem(PARTS, "rollups", unreadable)
    series = scrape()
    assert value(series, "gpuledger_metrics_scrape_errors", part="rollups") == 1
    assert value(series, "gpuledger_metrics_scrape_errors", part="figures") == 0
    assert "gpuledger_rollup_lag_seconds" not in names(series)
    assert value(series, "gpuledger_cluster_capacity_gpus", cluster="test") == pytest.approx(8.0)
    assert "reading rollups failed" in caplog.text

"""The ``serving_overprovisioned`` rule, judged per complete UTC day from stored serving hours.

Each test writes a deployment's hours day by day: 4 replicas of 1 GPU each, a day at the knee
(1000 output tokens/s per replica within the latency targets) before the days under test. The
expected figures are worked out here from those hours, never read back from the rule.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import time_machine

from alerts.choices import ExemptionKind, Rule
from alerts.models import Episode, Exemption
from alerts.overprovisioned import evaluate_serving, usable, wasted_gpu_hours
from ledger.choices import RateKind
from ledger.models import RateCard
from quotas.models import Team, TeamNamespace
from serving.knee import OUTPUT_TOKENS, Knee
from serving.models import ServingCollection, ServingHour, ServingWorkload
from tests.alerts.serving_days import DAY, HOUR, REPLICAS, collected, write_day

D0 = datetime(2026, 11, 2, tzinfo=UTC)
PRICE = Decimal("2.50")


def day(n: int) -> datetime:
    return D0 + n * DAY


@pytest.fixture
def chat(cluster, settings):
    settings.GPULEDGER_ALERT_SERVING_DAYS = 3
    settings.GPULEDGER_ALERT_SERVING_KNEE_DAYS = 14
    settings.GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS = 7
    team = Team.objects.create(name="serving")
    TeamNamespace.objects.create(team=team, cluster=cluster, namespace="ml-serving")
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        price_per_gpu_hour=PRICE,
        currency=settings.GPULEDGER_CURRENCY,
        effective_from=D0 - 30 * DAY,
    )
    workload = ServingWorkload.objects.create(
        cluster=cluster,
        namespace="ml-serving",
        kind="Deployment",
        name="chat",
        ttft_p95_target_seconds=1.0,
        itl_p95_target_seconds=0.05,
    )
    write_day(workload, D0, per_replica=1000.0)  # the knee: 1000 tokens/s per replica
    return workload


def test_an_episode_opens_after_three_days_below_and_ends_on_the_first_day_at_the_knee(chat):
    # Days 1-3 at 200 tokens/s per replica (below 500, half the knee), day 4 at 800.
    for n in (1, 2, 3):
        write_day(chat, day(n), per_replica=200.0)
    write_day(chat, day(4), per_replica=800.0)

    # Day 3, 02:00: days 1 and 2 count, two days in a row are not enough.
    evaluate_serving(day(3) + 2 * HOUR)
    assert not Episode.objects.exists()

    # Day 4, 02:00: day 3 is the third in a row.
    first = evaluate_serving(day(4) + 2 * HOUR)
    assert first.created == 1
    episode = Episode.objects.get()
    assert episode.rule == Rule.SERVING_OVERPROVISIONED
    assert episode.serving_workload == chat
    assert episode.subject_key == "serving:test/ml-serving/Deployment/chat"
    assert episode.namespace == "ml-serving" and str(episode.team) == "serving"
    assert episode.started_at == day(1)
    assert episode.fired_at == day(4)  # the end of the third day
    assert episode.resolved_at is None
    assert episode.evaluated_until == day(4)
    assert episode.held_seconds == 3 * 86400
    assert episode.gpus == REPLICAS
    # 3 days x 24 h x 4 GPUs held; each hour's load (800 tokens/s) needs one replica at the
    # knee: 3 replicas' GPUs wasted an hour.
    assert episode.held_gpu_hours == pytest.approx(3 * 24 * 4)
    assert episode.idle_gpu_hours == pytest.approx(3 * 24 * 3)
    assert episode.cost == Decimal(3 * 24 * 3) * PRICE
    evidence = episode.evidence
    assert evidence["knee_per_replica"] == pytest.approx(1000.0)
    assert evidence["knee_unit"] == OUTPUT_TOKENS
    assert evidence["share_below"] == 1.0 and evidence["judged_hours"] == 72
    assert [d["status"] for d in evidence["days"]] == ["below_knee"] * 3
    assert episode.summary == (
        "Serving ml-serving/Deployment/chat: below 50% of its knee (1,000 output tokens/s per "
        "replica) in 100% of its judged hours on 3 days in a row, holding 4 GPUs."
    )

    # Day 5, 02:00: day 4 at 800 per replica does not count: resolved at its start.
    second = evaluate_serving(day(5) + 2 * HOUR)
    assert (second.created, second.updated) == (0, 1)
    episode.refresh_from_db()
    assert episode.resolved_at == day(4)
    assert episode.evaluated_until == day(5)
    assert episode.held_seconds == 3 * 86400
    assert episode.evidence["days"][-1]["status"] == "at_knee"


def test_re_running_changes_nothing(chat):
    for n in (1, 2, 3, 4):
        write_day(chat, day(n), per_replica=150.0)
    now = day(5) + 3 * HOUR
    evaluate_serving(now)
    episode = Episode.objects.get()
    assert episode.started_at == day(1) and episode.evaluated_until == day(5)
    assert episode.held_seconds == 4 * 86400

    again = evaluate_serving(now)
    later = evaluate_serving(now + 5 * HOUR)  # the same complete days

    assert (again.created, again.updated, again.days) == (0, 0, 0)
    assert (later.created, later.updated, later.days) == (0, 0, 0)
    assert Episode.objects.count() == 1
    episode.refresh_from_db()
    assert episode.held_seconds == 4 * 86400


def test_a_day_not_yet_collected_waits(chat):
    for n in (1, 2, 3):
        write_day(chat, day(n), per_replica=150.0)
    ServingCollection.objects.filter(hour=day(4) - HOUR).delete()  # day 3's last hour

    evaluate_serving(day(4) + 2 * HOUR)
    assert not Episode.objects.exists()

    collected(chat, day(3))
    evaluate_serving(day(4) + 3 * HOUR)
    assert Episode.objects.get().fired_at == day(4)


def test_without_a_knee_there_is_no_episode_and_the_reason_is_logged(cluster, settings, caplog):
    settings.GPULEDGER_ALERT_SERVING_DAYS = 2
    workload = ServingWorkload.objects.create(
        cluster=cluster, namespace="ml", kind="Deployment", name="slow", ttft_p95_target_seconds=1
    )
    for n in (0, 1, 2, 3):
        write_day(workload, day(n), per_replica=100.0, ttft=4.0)  # never within 1 s

    with caplog.at_level(logging.INFO, logger="alerts.overprovisioned"):
        result = evaluate_serving(day(4) + 2 * HOUR)

    assert not Episode.objects.exists()
    assert result.not_judged["no_knee"] == 4
    assert "serving ml/Deployment/slow: 4 days not judged (no knee" in caplog.text


def test_a_day_without_telemetry_breaks_the_run_and_bad_rows_are_skipped(chat, caplog):
    write_day(chat, day(1), per_replica=150.0)
    write_day(chat, day(3), per_replica=150.0)  # day 2: no serving hours at all
    write_day(chat, day(4), per_replica=150.0)
    ServingHour.objects.filter(hour=day(4)).update(replica_hours=0.0)  # a bad row

    with caplog.at_level(logging.INFO, logger="alerts.overprovisioned"):
        result = evaluate_serving(day(5) + 2 * HOUR)

    assert not Episode.objects.exists()  # days 3 and 4 are two in a row, not three
    assert result.not_judged["no_telemetry"] >= 1
    assert result.skipped_rows == 1
    assert "no serving telemetry in the day" in caplog.text
    assert "skipped bad hours {'no_replica_time': 1}" in caplog.text


def test_an_open_episode_ends_on_a_day_without_telemetry(chat):
    for n in (1, 2, 3):
        write_day(chat, day(n), per_replica=150.0)
    collected(chat, day(4))  # day 4 collected, nothing served
    evaluate_serving(day(5) + 2 * HOUR)
    episode = Episode.objects.get()
    assert episode.resolved_at == day(4)
    assert episode.evidence["days"][-1]["status"] == "no_telemetry"


def test_non_finite_figures_are_bad_rows():
    row = {
        "hour": D0,
        "replica_hours": 2.0,
        "output_tokens_per_second": math.nan,
        "requests_per_second": 1.0,
        "mean_waiting": 0.0,
        "ttft_p95_seconds": 0.2,
        "itl_p95_seconds": 0.02,
        "gpu_hours": 2.0,
    }
    assert usable(row) == (None, "nonfinite_figure")
    assert usable({**row, "replica_hours": math.nan}) == (None, "no_replica_time")
    hour, why = usable({**row, "output_tokens_per_second": None})
    assert hour is not None and why == ""


def test_wasted_gpu_hours_keep_the_replicas_the_load_needs():
    knee = Knee(hour=None, per_replica=1000.0, unit=OUTPUT_TOKENS, replicas=2.0)
    hour, _ = usable(
        {
            "hour": D0,
            "replica_hours": 6.0,
            "output_tokens_per_second": 2500.0,  # needs 3 replicas at 1000 each
            "requests_per_second": 10.0,
            "mean_waiting": 0.0,
            "ttft_p95_seconds": 0.2,
            "itl_p95_seconds": 0.02,
            "gpu_hours": 12.0,  # 2 GPUs a replica
        }
    )
    assert hour is not None
    assert wasted_gpu_hours(hour, knee) == pytest.approx(3 * 2.0)


@pytest.mark.parametrize("kind", [ExemptionKind.SERVING_WORKLOAD, ExemptionKind.NAMESPACE])
def test_an_exempt_deployment_gets_an_exempt_episode(chat, kind):
    if kind == ExemptionKind.SERVING_WORKLOAD:
        Exemption.objects.create(kind=kind, serving_workload=chat, reason="launch reserve")
    else:
        Exemption.objects.create(kind=kind, namespace="ml-serving")
    for n in (1, 2, 3):
        write_day(chat, day(n), per_replica=150.0)

    evaluate_serving(day(4) + 2 * HOUR)

    episode = Episode.objects.get()
    assert episode.exempt
    if kind == ExemptionKind.SERVING_WORKLOAD:
        assert episode.exempt_reason == (
            "One serving deployment exemption: ml-serving/Deployment/chat (launch reserve)"
        )


def test_the_task_runs_hourly_from_beat_within_its_interval(chat):
    from alerts.tasks import evaluate_serving_overprovisioned
    from config.settings import CELERY_BEAT_SCHEDULE

    entry: dict[str, Any] = CELERY_BEAT_SCHEDULE["evaluate-serving-overprovisioned"]
    assert entry["task"] == evaluate_serving_overprovisioned.name
    assert entry["options"]["expires"] <= entry["schedule"] == 3600.0

    for n in range(1, 4):
        write_day(chat, day(n), per_replica=150.0)
    with time_machine.travel(day(4) + 2 * HOUR, tick=False):
        done = evaluate_serving_overprovisioned.apply().get()
    assert done["created"] == 1
    assert Episode.objects.get().fired_at == day(4)

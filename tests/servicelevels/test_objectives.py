"""Each day of a queue judged against its objective, against hand-computed percentiles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from servicelevels.models import QueueSLO
from servicelevels.objectives import BREACHED, MET, NOT_JUDGED, judge_days, latest_status
from tests.servicelevels.helpers import admitted, queue

D1 = datetime(2026, 11, 2, tzinfo=UTC)
DAY = timedelta(days=1)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def test_days_are_met_breached_or_not_judged(cluster):
    cq = queue(cluster)
    other = queue(cluster, "other", team="other")
    slo = QueueSLO.objects.create(
        cluster_queue=cq, statistic="p95", max_wait_seconds=600, min_admissions=3
    )
    # Day 1: waits 1..10 min; p95 = rank ceil(0.95 * 10) = 10 → 10 min = 600 s: met (at it).
    for n in range(1, 11):
        admitted(cq, f"d1-{n}", D1 + timedelta(hours=n), minutes(n))
    # Day 2: waits 5, 5, 20 min; p95 = rank ceil(2.85) = 3 → 1200 s: breached.
    for n, wait in enumerate((5, 5, 20)):
        admitted(cq, f"d2-{n}", D1 + DAY + timedelta(hours=1 + n), minutes(wait))
    # Another queue's long waits on day 2 do not count.
    admitted(other, "x", D1 + DAY + timedelta(hours=5), minutes(500))
    # Day 3: two admissions (under min_admissions): not judged, however long they waited.
    admitted(cq, "d3-0", D1 + 2 * DAY + timedelta(hours=1), minutes(90))
    admitted(cq, "d3-1", D1 + 2 * DAY + timedelta(hours=2), minutes(90))
    # Day 4: nothing admitted. Day 5 is under way at ``now`` (3 admissions so far, 1 min each).
    now = D1 + 4 * DAY + timedelta(hours=6)
    for n in range(3):
        admitted(cq, f"d5-{n}", D1 + 4 * DAY + timedelta(hours=1 + n), minutes(1))

    days = judge_days(slo, D1, D1 + 5 * DAY, now)

    assert [(d.day, d.status, d.admissions, d.value, d.partial) for d in days] == [
        (D1, MET, 10, 600.0, False),
        (D1 + DAY, BREACHED, 3, 1200.0, False),
        (D1 + 2 * DAY, NOT_JUDGED, 2, 5400.0, False),
        (D1 + 3 * DAY, NOT_JUDGED, 0, None, False),
        (D1 + 4 * DAY, MET, 3, 60.0, True),
    ]
    # The newest complete judged day is day 2.
    latest = latest_status(slo, now)
    assert latest is not None and (latest.day, latest.status) == (D1 + DAY, BREACHED)


def test_the_maximum_and_the_p50_are_judged_too(cluster):
    cq = queue(cluster)
    slo = QueueSLO.objects.create(cluster_queue=cq, statistic="max", max_wait_seconds=600)
    for n, wait in enumerate((1, 2, 11)):
        admitted(cq, f"w{n}", D1 + timedelta(hours=1 + n), minutes(wait))
    now = D1 + DAY + timedelta(hours=1)
    assert [d.status for d in judge_days(slo, D1, D1 + DAY, now)] == [BREACHED]  # 660 s
    slo.statistic = "p50"  # rank ceil(1.5) = 2 → 120 s
    assert [(d.status, d.value) for d in judge_days(slo, D1, D1 + DAY, now)] == [(MET, 120.0)]
    slo.enabled = False
    assert [d.status for d in judge_days(slo, D1, D1 + DAY, now)] == [NOT_JUDGED]

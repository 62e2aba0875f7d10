"""quotas.store.write_metric_samples: Kueue's metrics fill the windows the sync did not sample.

Exact (the window holds what the metrics say, API samples win), idempotent (a re-run writes
nothing) and set-based (one statement on PostgreSQL whatever the number of queues).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Cluster
from quotas.choices import SampleSource
from quotas.ingest import QueueSampleRow
from quotas.models import ClusterQueue, ClusterQueueSample
from quotas.store import write_metric_samples, write_queue_samples

pytestmark = pytest.mark.django_db

AT = datetime(2026, 3, 2, 10, 5, tzinfo=UTC)
GPU = "nvidia.com/gpu"
FIGURES = (
    "window_seconds",
    "total",
    "reserved",
    "borrowed",
    "lent",
    "nominal",
    "borrowing_limit",
    "lending_limit",
    "pending_demand",
    "pending_workloads",
    "admitted_workloads",
    "source",
)


def row(queue: str, flavor: str = "h100", *, total: str = "5", **figures: object) -> QueueSampleRow:
    values: dict[str, object] = {
        "total": Decimal(total),
        "reserved": Decimal(total),
        "borrowed": Decimal(0),
        "lent": Decimal(0),
        "nominal": Decimal(8),
        "borrowing_limit": None,
        "lending_limit": Decimal(4),
        "pending_demand": Decimal(0),
        "pending_workloads": 0,
        "admitted_workloads": 0,
    }
    values.update(figures)
    return QueueSampleRow(cluster_queue_name=queue, flavor_name=flavor, resource=GPU, **values)  # type: ignore[arg-type]


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster.objects.create(name="east")
    for name in ("team-a", "team-b", "team-c"):
        ClusterQueue.objects.create(cluster=cluster, name=name)
    return cluster


def stored(cluster: Cluster, at: datetime = AT) -> dict[tuple[str, str], dict]:
    samples = ClusterQueueSample.objects.filter(cluster_queue__cluster=cluster, sampled_at=at)
    return {
        (values.pop("cluster_queue__name"), values.pop("flavor_name")): values
        for values in samples.values("cluster_queue__name", "flavor_name", "id", *FIGURES)
    }


def test_a_first_write_stores_every_figure_of_every_known_queue(cluster):
    rows = [
        row("team-a", total="12", borrowed=Decimal(4), pending_demand=Decimal("2.5")),
        row("team-a", "a100", total="0", borrowing_limit=Decimal(16), lending_limit=None),
        row("team-b", total="3", lent=Decimal(1), pending_workloads=7, admitted_workloads=2),
    ]

    assert write_metric_samples(cluster, rows, AT, 300) == 3

    got = stored(cluster)
    assert set(got) == {("team-a", "h100"), ("team-a", "a100"), ("team-b", "h100")}
    team_a = got[("team-a", "h100")]
    assert team_a["source"] == SampleSource.METRICS
    assert team_a["window_seconds"] == 300
    assert (team_a["total"], team_a["borrowed"], team_a["nominal"]) == (12, 4, 8)
    assert team_a["pending_demand"] == Decimal("2.5")
    assert (team_a["borrowing_limit"], team_a["lending_limit"]) == (None, 4)
    assert (
        got[("team-a", "a100")]["borrowing_limit"],
        got[("team-a", "a100")]["lending_limit"],
    ) == (
        16,
        None,
    )
    team_b = got[("team-b", "h100")]
    assert (team_b["lent"], team_b["pending_workloads"], team_b["admitted_workloads"]) == (1, 7, 2)


def test_a_rerun_with_the_same_answers_writes_nothing(cluster):
    rows = [row("team-a"), row("team-a", "a100", total="1.3333337"), row("team-b")]
    write_metric_samples(cluster, rows, AT, 60)
    before = stored(cluster)

    # More decimal places than the column keeps: the stored, rounded figure is the same.
    assert write_metric_samples(cluster, rows, AT, 60) == 0

    assert stored(cluster) == before
    assert before[("team-a", "a100")]["total"] == Decimal("1.333334")


def test_a_rerun_with_other_figures_updates_those_samples_in_place(cluster):
    write_metric_samples(cluster, [row("team-a"), row("team-b"), row("team-c")], AT, 60)
    before = stored(cluster)

    changed = [row("team-a"), row("team-b", total="6"), row("team-c", lending_limit=None)]
    assert write_metric_samples(cluster, changed, AT, 60) == 2

    after = stored(cluster)
    assert after[("team-a", "h100")] == before[("team-a", "h100")]
    assert after[("team-b", "h100")]["id"] == before[("team-b", "h100")]["id"]
    assert after[("team-b", "h100")]["total"] == 6
    assert after[("team-c", "h100")]["lending_limit"] is None
    # A new window length is a change too.
    assert write_metric_samples(cluster, changed, AT, 120) == 3


def test_a_queue_or_flavor_no_longer_answered_loses_its_metrics_sample(cluster):
    write_metric_samples(cluster, [row("team-a"), row("team-a", "a100"), row("team-b")], AT, 60)
    write_metric_samples(cluster, [row("team-b")], AT + timedelta(minutes=1), 60)

    assert write_metric_samples(cluster, [row("team-a")], AT, 60) == 0

    assert set(stored(cluster)) == {("team-a", "h100")}
    # Other windows keep theirs.
    assert set(stored(cluster, AT + timedelta(minutes=1))) == {("team-b", "h100")}
    # No answers at all: the window has no metrics samples left.
    assert write_metric_samples(cluster, [], AT, 60) == 0
    assert stored(cluster) == {}


def test_the_api_servers_sample_wins_over_the_metrics(cluster):
    # given: the sync sampled team-a's h100 and team-c's h100 in this window
    write_queue_samples(cluster, [row("team-a", total="9"), row("team-c", total="2")], AT, 60)
    api = stored(cluster)

    # when: the metrics say otherwise for team-a, and nothing about team-c
    written = write_metric_samples(cluster, [row("team-a", total="1"), row("team-b")], AT, 60)

    # then: the API samples are untouched; only team-b's comes from the metrics
    assert written == 1
    got = stored(cluster)
    assert got[("team-a", "h100")] == api[("team-a", "h100")]
    assert got[("team-c", "h100")] == api[("team-c", "h100")]
    assert got[("team-b", "h100")]["source"] == SampleSource.METRICS
    assert write_metric_samples(cluster, [row("team-a", total="1"), row("team-b")], AT, 60) == 0

    # and: the sync's later sample replaces the metrics one, which a re-run then leaves alone
    write_queue_samples(cluster, [row("team-b", total="4")], AT, 60)
    assert write_metric_samples(cluster, [row("team-b")], AT, 60) == 0
    team_b = stored(cluster)[("team-b", "h100")]
    assert (team_b["source"], team_b["total"]) == (SampleSource.API, 4)


def test_other_clusters_are_never_touched(cluster):
    west = Cluster.objects.create(name="west")
    ClusterQueue.objects.create(cluster=west, name="team-a")
    write_metric_samples(west, [row("team-a", total="7")], AT, 60)

    write_metric_samples(cluster, [row("team-b")], AT, 60)
    write_metric_samples(cluster, [], AT, 60)

    assert stored(west)[("team-a", "h100")]["total"] == 7
    assert set(stored(cluster)) == set()


def test_queues_the_api_server_never_listed_are_skipped_and_logged(cluster, caplog):
    with caplog.at_level(logging.INFO, logger="quotas.store.samples"):
        written = write_metric_samples(
            cluster, [row("team-a"), row("ghost-2"), row("ghost-1", "a100")], AT, 60
        )

    assert written == 1
    assert set(stored(cluster)) == {("team-a", "h100")}
    assert "2 ClusterQueue(s)" in caplog.text
    assert "e.g. ghost-1" in caplog.text


def test_a_repeated_queue_and_flavor_keeps_its_first_row(cluster):
    written = write_metric_samples(cluster, [row("team-a", total="3"), row("team-a")], AT, 60)

    assert written == 1
    assert stored(cluster)[("team-a", "h100")]["total"] == 3


@pytest.mark.postgresql(reason="one statement on PostgreSQL; the other databases' path batches")
def test_the_write_is_one_statement_whatever_the_number_of_queues(cluster):
    ClusterQueue.objects.bulk_create(
        [ClusterQueue(cluster=cluster, name=f"cq-{q:03d}") for q in range(200)]
    )
    rows = [row(f"cq-{q:03d}", flavor) for q in range(200) for flavor in ("h100", "a100")]

    with CaptureQueriesContext(connection) as first:
        assert write_metric_samples(cluster, rows, AT, 60) == 400
    with CaptureQueriesContext(connection) as rerun:
        assert write_metric_samples(cluster, rows, AT, 60) == 0

    assert (len(first), len(rerun)) == (1, 1)


@pytest.mark.django_db
def test_an_array_literal_quotes_every_element_and_writes_none_as_null():
    from django.db import connection

    from quotas.store.samples import array_literal

    values = ["cq-a", None, 'we"ird\\name', "a,b{c}", " spaced ", "NULL"]
    literal = array_literal(values)

    assert literal == '{"cq-a",NULL,"we\\"ird\\\\name","a,b{c}"," spaced ","NULL"}'
    assert array_literal([]) == "{}"
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::text[], %s::numeric(12,4)[]", [literal, array_literal(
                [Decimal("1.5"), None, 3]
            )])  # fmt: skip
            assert cursor.fetchone() == (values, [Decimal("1.5000"), None, Decimal("3.0000")])

"""A Prometheus that hangs or drips: every call, and every collection run, ends by its deadline.

A per-read socket timeout does not bound a call against a server that sends a byte at a time;
``PrometheusClient`` cuts the whole call at its timeout, and the collector's run at
``GPULEDGER_COLLECT_DEADLINE_SECONDS``, recording a failed ``IngestRun`` and writing nothing of
the window it could not read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from core.deadlines import Deadline
from fleet import constants as c
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, CollectionCursor, IngestRun
from fleet.prometheus import PrometheusClient, PrometheusError
from ledger.collector import Collector
from ledger.models import GpuUsage
from tests.prometheus_server import StuckPrometheus

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
DEADLINE = 2


@pytest.fixture
def prometheus() -> Iterator[StuckPrometheus]:
    server = StuckPrometheus()
    yield server
    server.close()


# --- one call --------------------------------------------------------------------------------


def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_timeout(prometheus):
    # A byte every 0.2 s never trips a 1 s read timeout: the answer would take about 30 s.
    prometheus.stick("DCGM_FI_PROF_SM_ACTIVE", drip_seconds=0.2)
    started = time.monotonic()

    with pytest.raises(PrometheusError) as failure:
        PrometheusClient(prometheus.url, timeout=1).query("avg(DCGM_FI_PROF_SM_ACTIVE[1m])", T0)

    assert time.monotonic() - started < 1 + 1
    assert not failure.value.permanent
    assert failure.value.message == (
        "/api/v1/query (DCGM_FI_PROF_SM_ACTIVE): timed out, no complete answer within the "
        "request timeout of 1 s (the cluster's Prometheus timeout)"
    )


def test_a_call_ends_by_the_callers_deadline_before_its_own_timeout(prometheus):
    prometheus.stick("up", hang=True)
    client = PrometheusClient(prometheus.url, timeout=30)
    client.deadline = Deadline(1, "the collection deadline")
    started = time.monotonic()

    with pytest.raises(PrometheusError, match="within the collection deadline of 1 s"):
        client.query("up", T0)

    assert time.monotonic() - started < 1 + 1
    with pytest.raises(PrometheusError, match="not sent, the collection deadline of 1 s had"):
        client.query("sum(kube_pod_info{})", T0)


def test_a_healthy_answer_is_unaffected(prometheus):
    client = PrometheusClient(prometheus.url, timeout=1)
    client.deadline = Deadline(5, "the collection deadline")

    assert client.query("up", T0) == []
    assert client.query_range("up", T0, T0 + timedelta(minutes=5), 60) == []


# --- a collection run ------------------------------------------------------------------------


@pytest.fixture
def cluster(db, prometheus, settings):
    settings.GPULEDGER_COLLECT_SECONDS = 60
    settings.GPULEDGER_COLLECT_DEADLINE_SECONDS = DEADLINE
    cluster = Cluster.objects.create(
        name="stuck", prometheus_url=prometheus.url, prometheus_timeout_seconds=30
    )
    CollectionCursor.objects.create(cluster=cluster, source=IngestSource.DCGM, last_window_end=T0)
    return cluster


def after_windows(count: int) -> datetime:
    """A run moment at which ``count`` windows after T0 are due."""
    return T0 + timedelta(minutes=count, seconds=c.COLLECT_DELAY_SECONDS + 1)


def cursor(cluster: Cluster) -> CollectionCursor:
    return CollectionCursor.objects.get(cluster=cluster, source=IngestSource.DCGM)


@pytest.mark.parametrize(
    "stuck",
    [{"hang": True}, {"drip_seconds": 0.3}],
    ids=["hangs", "drips a byte every 0.3 s"],
)
def test_a_run_against_a_stuck_prometheus_fails_within_its_deadline(prometheus, cluster, stuck):
    # Given a Prometheus that answers every query but the GPU requests one
    prometheus.stick("kube_pod_container_resource_requests", **stuck)
    started = time.monotonic()

    # When a run collects the one window due
    with pytest.raises(PrometheusError) as failure:
        Collector(cluster).run(now=after_windows(1))

    # Then it ends by its deadline, not the 30 s request timeout, and says which call it was
    elapsed = time.monotonic() - started
    assert elapsed < DEADLINE + 2, elapsed
    assert not failure.value.permanent
    run = IngestRun.objects.get(cluster=cluster, source=IngestSource.DCGM)
    assert run.status == IngestStatus.FAILED
    assert "kube_pod_container_resource_requests" in run.error
    assert "the collection deadline of 2 s (GPULEDGER_COLLECT_DEADLINE_SECONDS)" in run.error
    assert run.window_end == T0 + timedelta(minutes=1)
    # and writes nothing of the window, keeps its cursor and lets go of its lease
    assert not GpuUsage.objects.filter(cluster=cluster).exists()
    assert cursor(cluster).last_window_end == T0
    assert not cursor(cluster).claimed_by


def test_a_long_catch_up_stops_between_windows_at_the_deadline(prometheus, cluster, settings):
    # Each query answers after 0.3 s: a window (10 queries, 4 at a time) takes about a second.
    prometheus.delay = 0.3
    started = time.monotonic()

    result = Collector(cluster).run(now=after_windows(20))

    elapsed = time.monotonic() - started
    assert elapsed < DEADLINE + 3, elapsed
    assert 0 < result.windows < 20
    # The windows it did are whole and the cursor stands on the last of them.
    assert cursor(cluster).last_window_end == result.last_window_end
    runs = IngestRun.objects.filter(cluster=cluster, source=IngestSource.DCGM)
    assert runs.filter(status=IngestStatus.SUCCESS).count() == result.windows
    assert not runs.filter(status=IngestStatus.FAILED).exists()

    # The next run carries on from there. Its deadline is out of the way: on a loaded machine
    # the 19 windows left can take longer than 2 s even against a prompt Prometheus.
    prometheus.delay = 0.0
    settings.GPULEDGER_COLLECT_DEADLINE_SECONDS = 120
    again = Collector(cluster).run(now=after_windows(20))
    assert result.windows + again.windows == 20
    assert cursor(cluster).last_window_end == T0 + timedelta(minutes=20)

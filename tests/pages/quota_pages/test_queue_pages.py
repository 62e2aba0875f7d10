"""The ClusterQueue list, the ClusterQueue page and its charts.

The data is the Kueue scenario of ``tests.pages.quota_pages.world``, built once per module.
"""

from __future__ import annotations

from datetime import timedelta

from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from core.timewindows import floor_time
from dashboard.templatetags.formatting import duration as fmt_duration
from dashboard.templatetags.formatting import figure as fmt
from quotas.choices import SampleSource
from quotas.models import (
    ClusterQueueSample,
    WorkloadTransition,
)
from tests.pages.quota_pages.world import (
    chart_urls,
    figure,
    page_urls,
    range_hours,
    rollup_sum,
    text,
    trace,
)

# --- ClusterQueues ------------------------------------------------------------------------------


def test_queue_list_shows_a_lead_only_their_teams_queues(beta_client, world):
    response = beta_client.get(page_urls(world)["queue-list"])

    assert [row["queue"].name for row in response.context["rows"]] == ["team-b"]
    assert response.context["hidden"] == 1
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]) not in text(response)


@override_settings(GPULEDGER_TEAM_VISIBILITY="public")
def test_queue_list_shows_every_queue_when_teams_are_public(beta_client, world):
    response = beta_client.get(page_urls(world)["queue-list"])
    rows = {row["queue"].name: row for row in response.context["rows"]}

    assert rows["team-a"]["nominal"] == fmt(16 + 8)
    assert rows["team-a"]["usage"] == fmt(
        world.wl["a1"].admitted_gpus + world.wl["a2"].admitted_gpus
    )
    assert rows["team-a"]["borrowed"] == "4"
    assert rows["team-a"]["quotas"][1]["borrowing_limit"] == "unlimited"
    body = text(response)
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-b"]) in body
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]) in body


def test_queue_list_search_filters_by_name(staff_client, world):
    rows = staff_client.get(page_urls(world)["queue-list"] + "?q=team-b").context["rows"]

    assert [row["queue"].name for row in rows] == ["team-b"]


def test_queue_page_shows_unlimited_for_null_limits_and_0_for_zero(staff_client, world):
    response = staff_client.get(page_urls(world)["queue"])
    quotas = {(q["flavor"], q["resource"]): q for q in response.context["quota_rows"]}

    a100 = quotas[("a100", "nvidia.com/gpu")]
    assert a100["borrowing_limit"] == "unlimited"
    assert a100["lending_limit"] == "0"
    h100 = quotas[("h100", "nvidia.com/gpu")]
    assert (h100["nominal"], h100["borrowing_limit"], h100["lending_limit"]) == ("16", "8", "8")
    assert quotas[("h100", "memory")]["nominal"] == "4,096 GiB"


def test_queue_page_lists_pending_workloads_by_position_with_reason_and_wait(staff_client, world):
    response = staff_client.get(page_urls(world)["queue"])
    rows = response.context["pending_rows"]

    assert [row["workload"] for row in rows] == [world.wl["a3"], world.wl["a5"]]
    a3, a5 = rows
    assert a3["wait"] == fmt_duration((timezone.now() - world.wl["a3"].observed_at).total_seconds())
    # a5 was requeued after its preemption: it waits since the requeue, not since creation.
    requeued = WorkloadTransition.objects.get(workload=world.wl["a5"], kind="requeued").at
    assert a5["waiting_since"] == requeued
    assert a5["requeued"] is True
    assert "8 more needed" in text(response)


def test_queue_page_counts_evictions_in_range(staff_client, world):
    response = staff_client.get(page_urls(world)["queue"])
    stats = {s.get("testid"): s for s in response.context["stats"]}

    count = WorkloadTransition.objects.filter(
        workload__cluster_queue=world.cq_a, kind__in=["evicted", "preempted"]
    ).count()
    assert stats["stat-evictions"]["value"] == str(count)
    assert stats["stat-borrowed"]["value"] == "4"


def test_queue_usage_chart_plots_flavors_nominal_borrowed_and_pending(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["queue-usage"]))

    hours = range_hours(world, 1)
    filters = {"scope": "cluster_queue", "cluster_queue": world.cq_a}
    assert trace(fig, "Allocated h100")["y"][-1] == rollup_sum(
        "allocated_gpu_hours", [hours[-1]], flavor="h100", **filters
    )
    assert trace(fig, "Nominal quota")["y"][-1] == rollup_sum(
        "nominal_gpu_hours", [hours[-1]], **filters
    )
    assert trace(fig, "Borrowed")["y"][-1] == rollup_sum(
        "borrowed_gpu_hours", [hours[-1]], **filters
    )
    assert trace(fig, "Pending demand")["y"][-1] == rollup_sum(
        "pending_gpu_hours", [hours[-1]], **filters
    )
    assert len(fig["layout"]["shapes"]) == 1


def test_queue_evictions_chart_counts_per_hour_by_kind_and_reason(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["queue-evictions"]))

    preempted = trace(fig, "Preempted: InCohortReclamation")
    evicted = trace(fig, "Evicted: Preempted")
    at = WorkloadTransition.objects.get(workload=world.wl["a5"], kind="preempted").at
    assert preempted["x"] == [floor_time(at, 3600).isoformat()]
    assert preempted["y"] == [1]
    assert evicted["y"] == [1]


def test_queue_evictions_chart_is_empty_outside_the_range(staff_client, world):
    start = (world.now - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    end = (world.now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")

    fig = figure(
        staff_client.get(chart_urls(world)["queue-evictions"] + f"?start={start}&end={end}")
    )

    assert fig["data"] == []
    assert fig["meta"]["empty"] is True


def test_queue_page_says_quota_history_starts_at_the_first_sync_without_kueue_metrics(
    staff_client, world
):
    # given: only the API server sync has sampled this cluster's queues
    response = staff_client.get(page_urls(world)["queue"])
    assert "Quota history starts at the first sync" in text(response)

    # when: Kueue's metrics filled some window
    ClusterQueueSample.objects.filter(pk=ClusterQueueSample.objects.first().pk).update(
        source=SampleSource.METRICS
    )

    # then: the hours before the sync have quota history; no note
    response = staff_client.get(page_urls(world)["queue"])
    assert "Quota history starts at the first sync" not in text(response)

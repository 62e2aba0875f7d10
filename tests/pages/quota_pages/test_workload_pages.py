"""The workload page and its charts, stored and live.

The data is the Kueue scenario of ``tests.pages.quota_pages.world``, built once per module.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse

from core.timewindows import floor_time
from dashboard.templatetags.formatting import figure as fmt
from ledger.models import GpuUsage
from quotas.models import (
    Allocation,
    WorkloadTransition,
)
from tests.pages.conftest import PrometheusStub
from tests.pages.quota_pages.world import (
    figure,
    held_by_running_pods,
    range_hours,
    rollup_sum,
    text,
    trace,
)

# --- Workloads ----------------------------------------------------------------------------------


def test_workload_page_shows_gpus_activity_transitions_and_pods(lead_client, world):
    a1 = world.wl["a1"]
    response = lead_client.get(reverse("dashboard:workload-detail", args=[a1.pk]) + "?range=24h")
    stats = {s.get("testid"): s for s in response.context["stats"]}
    body = text(response)

    assert stats["stat-gpus"]["value"] == fmt(held_by_running_pods(a1))
    hours = range_hours(world, 1)
    active = rollup_sum("active_gpu_hours", hours, workload=a1)
    telemetry = rollup_sum("telemetry_gpu_hours", hours, workload=a1)
    assert stats["stat-sm"]["value"] == f"{active / telemetry * 100:.1f}"
    idle = rollup_sum("idle_gpu_hours", hours, workload=a1)
    assert stats["stat-idle"]["value"] == fmt(idle / a1.admitted_gpus)
    for allocation in Allocation.objects.filter(workload=a1):
        assert allocation.pod in body
        assert allocation.node_name in body
    assert "Pods ready" in body
    assert "Started" in body
    assert "stored collection windows" in body


def test_workload_page_opens_on_its_whole_life(staff_client, world):
    a4 = world.wl["a4"]  # finished 30 hours ago, first seen 40 hours ago

    response = staff_client.get(reverse("dashboard:workload-detail", args=[a4.pk]))

    time_range = response.context["time_range"]
    assert time_range.start == floor_time(a4.observed_at, 60)
    assert time_range.end == floor_time(a4.finished_at, 60) + timedelta(minutes=1)
    assert "Showing its whole life" in text(response)
    # Its charts ask for the same range.
    assert f"start={time_range.start:%Y-%m-%dT%H}%3A{time_range.start:%M}" in text(response)
    # The custom form stays shut: the page chose the range, not the user.
    assert 'range-custom" open' not in response.content.decode()


def test_workload_page_caps_a_long_life_at_30_days(staff_client, world):
    a1 = world.wl["a1"]
    a1.observed_at = world.now - timedelta(days=45)
    a1.save(update_fields=["observed_at"])

    response = staff_client.get(reverse("dashboard:workload-detail", args=[a1.pk]))

    time_range = response.context["time_range"]
    assert time_range.end - time_range.start == timedelta(days=30)
    assert "capped at its last 30 days" in text(response)


def test_an_explicit_range_still_wins_over_the_whole_life(staff_client, world):
    a4 = world.wl["a4"]

    response = staff_client.get(reverse("dashboard:workload-detail", args=[a4.pk]) + "?range=7d")

    assert response.context["time_range"].preset == "7d"
    assert "Showing its whole life" not in text(response)


def test_workload_page_links_the_preemptor_only_when_visible(staff_client, lead_client, world):
    url = reverse("dashboard:workload-detail", args=[world.wl["a5"].pk])
    preemptor_url = reverse("dashboard:workload-detail", args=[world.wl["c1"].pk])

    assert preemptor_url in text(staff_client.get(url))
    lead_body = text(lead_client.get(url))
    assert preemptor_url not in lead_body
    assert "a workload of another team" in lead_body


def test_workload_timeline_chart_draws_one_bar_per_phase(staff_client, world):
    a5 = world.wl["a5"]
    fig = figure(staff_client.get(reverse("dashboard:workload-chart-timeline", args=[a5.pk])))

    transitions = list(WorkloadTransition.objects.filter(workload=a5).order_by("at", "kind"))
    assert fig["meta"]["transitions"] == len(transitions)
    admitted = trace(fig, "Admitted")
    assert admitted["orientation"] == "h"
    admitted_at = next(t.at for t in transitions if t.kind == "admitted")
    evicted_at = next(t.at for t in transitions if t.kind == "evicted")
    assert admitted["base"] == [admitted_at.isoformat()]
    assert admitted["x"] == [(evicted_at - admitted_at).total_seconds() * 1000]
    pending = trace(fig, "Pending")
    assert len(pending["y"]) == 2  # created, then requeued
    assert "InCohortReclamation" in json.dumps(trace(fig, "Evicted")["customdata"])


def test_a_workload_without_transitions_shows_its_wait_since_creation(staff_client, world):
    waiting = world.wl["a1"]
    WorkloadTransition.objects.filter(workload=waiting).delete()
    fig = figure(staff_client.get(reverse("dashboard:workload-chart-timeline", args=[waiting.pk])))

    pending = trace(fig, "Pending")
    assert pending["base"] == [waiting.observed_at.isoformat()]
    assert fig["meta"]["transitions"] == 0


def test_workload_activity_chart_has_one_line_per_gpu_and_rollups_before_retention(
    staff_client, world
):
    a1 = world.wl["a1"]
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])
    fig = figure(staff_client.get(url + "?range=24h&metric=sm_active"))

    per_gpu = [t for t in fig["data"] if t["name"] != "Workload mean (hourly rollup)"]
    assert len(per_gpu) == len(world.gpus)
    assert fig["meta"]["per_gpu"] is True
    first = min(u.window_end for u in world.usage)
    second_gpu = [u for u in world.usage if u.gpu == world.gpus[1]]
    expected = sum(u.activity for u in second_gpu) / len(second_gpu) * 100
    values = [v for t in per_gpu for v in t["y"] if v is not None]
    assert max(values) == pytest.approx(expected)
    rollup_hours = [
        h
        for h in range_hours(world, 1) + [floor_time(world.now, 3600)]
        if h < floor_time(first, 3600)
    ]
    older = trace(fig, "Workload mean (hourly rollup)")
    assert len(older["x"]) == len([h for h in rollup_hours if h in world.hours])
    assert fig["layout"]["yaxis"]["range"] == [0, 100]


def test_workload_activity_chart_shows_a_big_gang_as_mean_and_range(staff_client, world):
    a1 = world.wl["a1"]
    end = floor_time(world.now, 60) - timedelta(minutes=1)
    extra = [
        GpuUsage(
            cluster=world.cluster,
            window_start=end - timedelta(seconds=60),
            window_end=end,
            gpu_key=f"gpu-node-x/GPU-x-{i}/",
            namespace="team-a",
            pod=f"big-{i}",
            workload=a1,
            allocated=True,
            gpus=1.0,
            activity=i / 10.0,
        )
        for i in range(9)
    ]
    GpuUsage.objects.bulk_create(extra)
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])

    fig = figure(staff_client.get(url))

    assert fig["meta"]["per_gpu"] is False
    gpus = len({u.gpu_key for u in world.usage} | {u.gpu_key for u in extra})
    assert fig["meta"]["gpus"] == gpus
    # The legend counts the GPUs held at once (the most in one window), not distinct GPUs seen.
    held: dict = {}
    for u in [*world.usage, *extra]:
        held[u.window_end] = held.get(u.window_end, 0.0) + u.gpus
    at_once = max(held.values())
    low, high = trace(fig, "Lowest GPU"), trace(fig, "Highest GPU")
    hour = floor_time(end - timedelta(seconds=1), 3600).isoformat()
    rows = [
        u
        for u in [*world.usage, *extra]
        if floor_time(u.window_end - timedelta(seconds=1), 3600).isoformat() == hour
    ]
    assert hour in low["x"]
    position = low["x"].index(hour)
    assert low["y"][position] == pytest.approx(min(u.activity for u in rows) * 100)
    assert high["y"][position] == pytest.approx(max(u.activity for u in rows) * 100)
    assert trace(fig, f"Mean of {fmt(at_once)} GPUs")


def test_a_gang_moved_to_other_gpus_is_still_counted_at_its_size(staff_client, world):
    # Given a 10-GPU gang that ran on ten GPUs, then (re-admitted) on ten others
    a1 = world.wl["a1"]
    GpuUsage.objects.filter(workload=a1).delete()
    end = floor_time(world.now, 60) - timedelta(minutes=1)
    rows = []
    for moved, window_end in enumerate([end - timedelta(minutes=30), end]):
        rows += [
            GpuUsage(
                cluster=world.cluster,
                window_start=window_end - timedelta(seconds=60),
                window_end=window_end,
                gpu_key=f"gpu-node-x/GPU-{moved}-{i}/",
                namespace="team-a",
                pod=f"gang-{moved}-{i}",
                workload=a1,
                allocated=True,
                gpus=1.0,
                activity=0.5,
            )
            for i in range(10)
        ]
    GpuUsage.objects.bulk_create(rows)
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])

    # When its activity chart is drawn
    fig = figure(staff_client.get(url))

    # Then the legend says 10 GPUs, though 20 distinct GPUs reported
    assert fig["meta"]["gpus"] == 20
    assert fig["meta"]["gpus_at_once"] == 10
    assert trace(fig, "Mean of 10 GPUs")
    assert not any("20 GPUs" in (t.get("name") or "") for t in fig["data"])


def test_workload_activity_chart_plots_tensor_activity(staff_client, world):
    a1 = world.wl["a1"]
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])

    fig = figure(staff_client.get(url + "?metric=tensor"))

    assert "PIPE_TENSOR_ACTIVE" in fig["layout"]["yaxis"]["title"]["text"]
    first_gpu = [u for u in world.usage if u.gpu == world.gpus[0]]
    expected = sum(u.pipe_tensor_active for u in first_gpu) / len(first_gpu) * 100
    values = [v for t in fig["data"] if "rollup" not in t["name"] for v in t["y"] if v is not None]
    assert min(values) == pytest.approx(expected)


def test_workload_activity_chart_resolves_windows_in_short_ranges(staff_client, world):
    a1 = world.wl["a1"]
    start = (world.now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk]) + f"?start={start}"

    fig = figure(staff_client.get(url))

    assert fig["meta"]["resolution"] == "window"
    per_gpu = [t for t in fig["data"] if "rollup" not in t["name"]]
    assert len(per_gpu[0]["x"]) == len({u.window_end for u in world.usage})


def test_workload_activity_reads_its_recent_hours_live_from_prometheus(
    staff_client, world, prometheus_stub
):
    a1 = world.wl["a1"]
    device = world.gpus[0]
    PrometheusStub.series = [{"UUID": device.uuid, "GPU_I_ID": ""}]
    a1.cluster.prometheus_url = prometheus_stub
    a1.cluster.save()

    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])
    fig = figure(staff_client.get(url + "?range=24h&metric=sm_active"))

    assert fig["meta"]["source"] == "live"
    line = trace(fig, f"{device.host} {device.uuid[:12]}")
    assert line["y"] == pytest.approx([25.0, 26.0, 27.0])
    query = PrometheusStub.queries[0]
    assert 'exported_pod=~"llama\\\\-pretrain\\\\-0|llama\\\\-pretrain\\\\-1"' in query
    assert 'exported_namespace="team-a"' in query and 'namespace="team-a"' in query
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in query  # the same fallback as collection


def test_workload_activity_falls_back_to_stored_windows_when_prometheus_fails(staff_client, world):
    a1 = world.wl["a1"]
    a1.cluster.prometheus_url = "http://127.0.0.1:9"  # discard port: refused
    a1.cluster.prometheus_timeout_seconds = 2
    a1.cluster.save()

    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])
    fig = figure(staff_client.get(url + "?range=24h&metric=sm_active"))

    assert fig["meta"]["source"] == "stored"
    assert "Prometheus could not be queried" in fig["meta"]["notice"]
    stored = [v for t in fig["data"] for v in t["y"] if v is not None]
    assert stored  # the stored windows are all still drawn


def test_upstream_text_in_chart_hovers_is_literal_never_markup(staff_client, world):
    # A Workload condition message is free text from the cluster: Plotly would render its
    # <a href>, <b> and <span style> as live markup unless it is escaped.
    a5 = world.wl["a5"]
    evicted = WorkloadTransition.objects.filter(workload=a5, kind="evicted").first()
    evicted.message = '<a href="http://127.0.0.1:9/x">fix</a> <b>now</b> <span style="x">!</span>'
    evicted.save()

    fig = figure(staff_client.get(reverse("dashboard:workload-chart-timeline", args=[a5.pk])))

    hover = json.dumps(trace(fig, "Evicted")["customdata"])
    assert "&lt;a href=" in hover and "&lt;b&gt;now&lt;/b&gt;" in hover
    assert "<a " not in hover and "<b>" not in hover and "<span" not in hover

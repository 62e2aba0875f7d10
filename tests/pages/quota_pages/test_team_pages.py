"""The team list, the team page and its charts.

The data is the Kueue scenario of ``tests.pages.quota_pages.world``, built once per module.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse

from dashboard.templatetags.formatting import duration as fmt_duration
from dashboard.templatetags.formatting import figure as fmt
from quotas.models import (
    ClusterQueueQuota,
)
from tests.pages.quota_pages.world import (
    chart_urls,
    figure,
    grow,
    page_urls,
    range_hours,
    rollup_sum,
    text,
    trace,
)

# --- Teams --------------------------------------------------------------------------------------


def test_team_list_shows_range_figures_per_team(staff_client, world):
    hours = range_hours(world, 1)
    response = staff_client.get(page_urls(world)["team-list"])

    body = text(response)
    alpha_allocated = rollup_sum("allocated_gpu_hours", hours, scope="team", team=world.alpha)
    alpha_idle = rollup_sum("idle_gpu_hours", hours, scope="team", team=world.alpha)
    beta_idle = rollup_sum("idle_gpu_hours", hours, scope="team", team=world.beta)
    assert f">{fmt(alpha_allocated)}<" in body
    assert f">{fmt(alpha_idle)}<" in body
    assert f">{fmt(beta_idle)}<" in body
    total = alpha_allocated + rollup_sum(
        "allocated_gpu_hours", hours, scope="team", team=world.beta
    )
    assert response.context["stats"][0]["value"] == fmt(total)


def test_team_list_range_picker_changes_the_sums(staff_client, world):
    day = staff_client.get(page_urls(world)["team-list"] + "?range=24h").context["rows"]
    week = staff_client.get(page_urls(world)["team-list"] + "?range=7d").context["rows"]

    alpha_week = rollup_sum(
        "allocated_gpu_hours", range_hours(world, 7), scope="team", team=world.alpha
    )
    assert week[0]["allocated"] == fmt(alpha_week)
    assert day[0]["allocated"] != week[0]["allocated"]


def test_team_list_shows_a_lead_their_teams_and_the_others_summed(lead_client, world):
    response = lead_client.get(page_urls(world)["team-list"])
    body = text(response)

    assert reverse("dashboard:team-detail", args=["alpha"]) in body
    assert reverse("dashboard:team-detail", args=["beta"]) not in body
    assert "Beta" not in body
    hours = range_hours(world, 1)
    others = response.context["others"]
    assert others["label"] == "Other teams (1)"
    assert others["allocated"] == fmt(
        rollup_sum("allocated_gpu_hours", hours, scope="team", team=world.beta)
    )


@override_settings(GPULEDGER_TEAM_VISIBILITY="public")
def test_team_list_links_every_team_for_a_lead_when_teams_are_public(lead_client, world):
    response = lead_client.get(page_urls(world)["team-list"])
    body = text(response)

    assert reverse("dashboard:team-detail", args=["beta"]) in body
    assert response.context["others"] is None


def test_team_list_links_every_team_for_staff(staff_client, world):
    body = text(staff_client.get(page_urls(world)["team-list"]))

    assert reverse("dashboard:team-detail", args=["alpha"]) in body
    assert reverse("dashboard:team-detail", args=["beta"]) in body


def test_team_page_numbers_come_first_and_match_the_data(lead_client, world):
    response = lead_client.get(page_urls(world)["team"])
    stats = {s["testid"]: s for s in response.context["stats"] if s.get("testid")}

    holding = [w for w in world.wl.values() if w.cluster_queue == world.cq_a and w.is_holding]
    assert stats["stat-allocated-now"]["value"] == fmt(sum(w.admitted_gpus for w in holding))
    nominal = sum(
        q.nominal
        for q in ClusterQueueQuota.objects.filter(
            cluster_queue=world.cq_a, resource="nvidia.com/gpu"
        )
    )
    assert stats["stat-nominal"]["value"] == fmt(nominal)
    hours = range_hours(world, 1)
    active = rollup_sum("active_gpu_hours", hours, scope="team", team=world.alpha)
    telemetry = rollup_sum("telemetry_gpu_hours", hours, scope="team", team=world.alpha)
    assert stats["stat-utilization"]["value"] == f"{active / telemetry * 100:.1f}"
    idle = rollup_sum("idle_gpu_hours", hours, scope="team", team=world.alpha)
    assert stats["stat-idle"]["value"] == fmt(idle)
    # The newest sample (4 borrowed), not the older one (2).
    assert stats["stat-borrowed"]["value"] == "4"
    pending = [
        w for w in world.wl.values() if w.cluster_queue == world.cq_a and w.state == "pending"
    ]
    assert stats["stat-pending"]["value"] == fmt(sum(w.requested_gpus for w in pending))
    body = text(response)
    assert body.index('data-testid="stat-allocated-now"') < body.index(
        'data-testid="chart-allocation"'
    )


def test_team_page_lists_workloads_with_activity_idle_time_and_links(lead_client, world):
    response = lead_client.get(page_urls(world)["team"])
    rows = {
        f"{r['workload'].namespace}/{r['workload'].name}": r
        for r in response.context["workload_rows"]
    }

    hours = range_hours(world, 1)
    a2 = world.wl["a2"]
    active = rollup_sum("active_gpu_hours", hours, workload=a2)
    telemetry = rollup_sum("telemetry_gpu_hours", hours, workload=a2)
    tensor = rollup_sum("tensor_active_gpu_hours", hours, workload=a2)
    covered = rollup_sum("tensor_covered_gpu_hours", hours, workload=a2)
    idle = rollup_sum("idle_gpu_hours", hours, workload=a2)
    row = rows["team-a/jobset-mixtral-ft"]
    assert row["sm_active"] == f"{active / telemetry * 100:.1f}"
    assert row["tensor"] == f"{tensor / covered * 100:.1f}"
    assert row["idle_hours"] == fmt(idle / a2.admitted_gpus)
    assert row["age"] == fmt_duration((world.now - a2.observed_at).total_seconds())
    body = text(response)
    assert reverse("dashboard:workload-detail", args=[a2.pk]) in body
    assert "borrowing 4" in body
    # Holding workloads first, then pending ones.
    states = [r["workload"].state for r in response.context["workload_rows"]]
    assert states.index("pending") > states.index("admitted")
    # Finished 30 h ago: outside the last 24 h, inside the last 7 days.
    assert "team-a/job-tokenizer-bench" not in rows
    week = lead_client.get(page_urls(world)["team"] + "?range=7d").context["workload_rows"]
    assert "job-tokenizer-bench" in {r["workload"].name for r in week}


def test_team_page_state_filter_keeps_only_that_state(lead_client, world):
    rows = lead_client.get(page_urls(world)["team"] + "?state=pending").context["workload_rows"]

    expected = {
        w.name for w in world.wl.values() if w.cluster_queue == world.cq_a and w.state == "pending"
    }
    assert {r["workload"].name for r in rows} == expected


def test_team_page_chart_urls_carry_the_range(lead_client, world):
    body = text(lead_client.get(page_urls(world)["team"] + "?range=7d&state=all"))

    assert reverse("dashboard:team-chart-allocation", args=["alpha"]) + "?range=7d" in body
    assert "state=all" not in body.split("data-chart-url")[1].split(">")[0]


def test_team_allocation_chart_plots_hourly_means_and_shades_borrowing(lead_client, world):
    fig = figure(lead_client.get(chart_urls(world)["team-allocation"] + "?range=24h"))

    hours = range_hours(world, 1)
    allocated = trace(fig, "Allocated")
    assert len(allocated["x"]) == len(hours)
    expected = [
        rollup_sum("allocated_gpu_hours", [hour], scope="team", team=world.alpha) for hour in hours
    ]
    assert allocated["y"] == expected
    nominal = trace(fig, "Nominal quota")["y"]
    assert nominal[-1] == rollup_sum(
        "nominal_gpu_hours", [hours[-1]], scope="team", team=world.alpha
    )
    active = trace(fig, "Real use (SM_ACTIVE-weighted)")["y"]
    assert active[-1] == pytest.approx(
        rollup_sum("active_gpu_hours", [hours[-1]], scope="team", team=world.alpha)
    )
    # One run of consecutive borrowing hours: one shaded rectangle, named in the legend.
    assert fig["meta"]["borrowing_periods"] == 1
    shape = fig["layout"]["shapes"][0]
    borrowed_hours = [
        h
        for h in hours
        if rollup_sum("borrowed_gpu_hours", [h], scope="team", team=world.alpha) > 0
    ]
    # Centred on the hourly points: half an hour before the first, after the last.
    assert shape["x0"] == (borrowed_hours[0] - timedelta(minutes=30)).isoformat()
    assert shape["x1"] == (borrowed_hours[-1] + timedelta(minutes=30)).isoformat()
    assert trace(fig, "Borrowing period")


def test_team_allocation_chart_follows_the_range(lead_client, world):
    day = figure(lead_client.get(chart_urls(world)["team-allocation"] + "?range=24h"))
    week = figure(lead_client.get(chart_urls(world)["team-allocation"] + "?range=7d"))

    assert len(trace(week, "Allocated")["x"]) == 7 * 24
    assert len(trace(day, "Allocated")["x"]) == 24
    # Hours before the first rollup are gaps, never zeros.
    week_y = trace(week, "Allocated")["y"]
    assert week_y[0] is None
    assert sum(1 for v in week_y if v is not None) == len(range_hours(world, 7))


def test_team_queues_chart_draws_each_flavor_against_its_own_quota(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["team-queues"]))

    names = [t["name"] for t in fig["data"]]
    assert "team-a · h100 allocated" in names
    assert "team-a · a100 nominal" in names
    stacked = trace(fig, "team-a · h100 allocated")
    # Unstacked: a line reads against its own nominal, not on top of another flavor's area.
    assert not any(t.get("stackgroup") for t in fig["data"])
    hours = range_hours(world, 1)
    assert stacked["y"][-1] == rollup_sum(
        "allocated_gpu_hours",
        [hours[-1]],
        scope="cluster_queue",
        cluster_queue=world.cq_a,
        flavor="h100",
    )
    assert not any("team-b" in name for name in names)


def test_team_queues_chart_folds_many_series_into_other(staff_client, world):
    grow(world, 24)

    fig = figure(staff_client.get(chart_urls(world)["team-queues"]))

    allocated = [t for t in fig["data"] if t["name"].endswith(" allocated")]
    assert len(allocated) == 10 + 1
    assert allocated[-1]["name"] == "Other allocated"


def test_team_queues_chart_marks_borrowing_per_flavor(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["team-queues"]))

    # team-a's h100 rollups: 20 allocated on 16 nominal every hour (it borrows on h100 only);
    # its a100 holds nothing of its 8.
    band = trace(fig, "team-a · h100 borrowing")
    allocated = trace(fig, "team-a · h100 allocated")
    assert band["y"] == [a if a is not None and a > 16 else None for a in allocated["y"]]
    assert any(value is not None for value in band["y"])
    assert not any(t["name"] == "team-a · a100 borrowing" for t in fig["data"])
    assert fig["meta"]["borrowing_series"] == 1

"""The cohort list, the cohort page and its charts.

The data is the Kueue scenario of ``tests.pages.quota_pages.world``, built once per module.
"""

from __future__ import annotations

from django.urls import reverse

from dashboard.templatetags.formatting import duration as fmt_duration
from dashboard.templatetags.formatting import figure as fmt
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
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

# --- Cohorts ------------------------------------------------------------------------------------


def test_cohort_list_shows_members_quota_usage_and_borrowing(staff_client, world):
    response = staff_client.get(page_urls(world)["cohort-list"])
    row = response.context["rows"][0]

    nominal = sum(
        q.nominal
        for q in ClusterQueueQuota.objects.filter(
            cluster_queue__cohort=world.cohort, resource="nvidia.com/gpu"
        )
    )
    assert row["nominal"] == fmt(float(nominal) + 8)  # plus the shared a100 pool
    holding = [w for w in world.wl.values() if w.is_holding]
    assert row["usage"] == fmt(sum(w.admitted_gpus for w in holding))
    assert row["borrowed"] == "4"
    assert row["lent"] == "4"
    assert row["cohort"].members == 2
    assert reverse("dashboard:cohort-detail", args=["test", "research"]) in text(response)


def test_cohort_page_shows_members_borrowers_and_reclaim_estimate(staff_client, world):
    response = staff_client.get(page_urls(world)["cohort"])
    body = text(response)

    members = {row["queue"].name: row for row in response.context["member_rows"]}
    assert members["team-a"]["borrowed"] == "4"
    assert members["team-b"]["lent"] == "4"
    assert members["team-b"]["policy"] == "LowerPriority"
    borrowers = [row["workload"] for row in response.context["borrower_rows"]]
    assert borrowers == [world.wl["a2"]]
    assert "1 min" in body or "60 s" in body  # a2's grace from its pod template

    (lender,) = response.context["lenders"]
    assert (lender.queue, lender.flavor, lender.lent) == (world.cq_b, "h100", 4.0)
    # Inputs: b2 pending at 1000 beats a2 at 500; observed preemption -> admission is 31 s; a2's
    # pods have a 60 s grace period, which bounds the answer from below.
    assert lender.pending_priority == world.wl["b2"].priority
    assert [v.name for v in lender.estimate.victims] == ["team-a/jobset-mixtral-ft"]
    assert response.context["pace"]["admission_seconds"] == 31
    assert lender.estimate.seconds == max(31, 60)
    assert f"≈ {fmt_duration(60)}" in body
    assert "reclaimWithinCohort: LowerPriority" in body


def test_cohort_page_measures_eviction_pace_from_transitions(staff_client, world):
    pace = staff_client.get(page_urls(world)["cohort"]).context["pace"]

    evictions = WorkloadTransition.objects.filter(kind__in=["evicted", "preempted"]).count()
    assert pace["evictions"] == evictions
    assert pace["active_hours"] == 1
    assert pace["per_hour"] == evictions / 1


def test_cohort_page_hides_other_teams_workload_names_from_a_lead(beta_client, world):
    response = beta_client.get(page_urls(world)["cohort"])
    body = text(response)

    assert response.status_code == 200
    assert "jobset-mixtral-ft" not in body
    assert "a workload of another team" in body
    assert reverse("dashboard:workload-detail", args=[world.wl["a2"].pk]) not in body
    # Its own queue is linked; the other team's is summed as "Other members (1)", unnamed.
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-b"]) in body
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]) not in body
    assert 'data-queue="team-a"' not in body
    assert "Other members (1)" in body


def test_cohort_page_with_never_policy_says_it_cannot_reclaim(staff_client, world):
    ClusterQueue.objects.filter(pk=world.cq_b.pk).update(reclaim_within_cohort="Never")

    response = staff_client.get(page_urls(world)["cohort"])

    (lender,) = response.context["lenders"]
    assert lender.estimate.status == "cannot"
    assert "Cannot reclaim" in text(response)


def test_cohort_usage_chart_stacks_members_against_nominal(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["cohort-usage"]))

    hours = range_hours(world, 1)
    team_a = trace(fig, "team-a")
    assert team_a["stackgroup"] == "usage"
    assert team_a["y"][-1] == rollup_sum(
        "allocated_gpu_hours", [hours[-1]], scope="cluster_queue", cluster_queue=world.cq_a
    )
    nominal = trace(fig, "Nominal quota (members)")
    assert nominal["y"][-1] == rollup_sum(
        "nominal_gpu_hours", [hours[-1]], scope="cluster_queue", cluster_queue__cohort=world.cohort
    )


def test_cohort_borrowing_chart_puts_lent_below_zero(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["cohort-borrowing"] + "?range=7d"))

    borrowed = trace(fig, "team-a borrowed")
    lent = trace(fig, "team-b lent")
    hours = range_hours(world, 7)
    assert sum(v or 0 for v in borrowed["y"]) == rollup_sum(
        "borrowed_gpu_hours", hours, scope="cluster_queue", cluster_queue=world.cq_a
    )
    assert sum(v or 0 for v in lent["y"]) == -rollup_sum(
        "lent_gpu_hours", hours, scope="cluster_queue", cluster_queue=world.cq_b
    )
    assert fig["layout"]["barmode"] == "relative"

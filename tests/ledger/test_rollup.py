"""Hourly rollups: every figure of every scope against the hand-worked hour of
``tests/ledger/rollup_scenario.py``."""

from __future__ import annotations

import pytest
from django.db.models import Sum

from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.rollup import (
    NO_COHORT,
    UNATTRIBUTED,
    roll_up_hour,
)
from tests.ledger.rollup_scenario import (
    A100,
    ALPHA_H100,
    BETA_H100,
    CQ_A_QUOTA,
    CQ_B_QUOTA,
    CQ_C_QUOTA,
    FLEET_A100,
    FLEET_H100,
    H0,
    H1,
    H100,
    L4,
    MIG_A100,
    NOTEBOOK_H100,
    QUOTA_FIGURES,
    RESEARCH_QUOTA,
    USAGE_FIGURES,
    WAIT_B,
    WAIT_C,
    W,
    assert_figures,
    keys_of,
    rollup_row,
)


def test_fleet_rows_hold_hand_worked_figures_per_flavor(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.FLEET) == {("test", "h100"), ("test", "a100-mig"), ("test", "l4")}
    h100 = rollup_row(RollupScope.FLEET, "test", H100)
    assert_figures(h100, 3, FLEET_H100, RESEARCH_QUOTA)
    assert_figures(rollup_row(RollupScope.FLEET, "test", A100), 3, FLEET_A100)
    assert_figures(rollup_row(RollupScope.FLEET, "test", L4), 3, CQ_C_QUOTA)
    assert (h100.team_id, h100.cluster_queue_id, h100.workload_id) == (None, None, None)


def test_node_and_flavor_rows_carry_capacity(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.NODE) == {("node-1", "h100"), ("node-2", "a100-mig")}
    assert_figures(rollup_row(RollupScope.NODE, "node-1", H100), 3, FLEET_H100)
    assert_figures(rollup_row(RollupScope.NODE, "node-2", A100), 3, FLEET_A100)
    assert keys_of(RollupScope.FLAVOR) == {("h100", "h100"), ("a100-mig", "a100-mig"), ("l4", "l4")}
    assert_figures(rollup_row(RollupScope.FLAVOR, "h100", H100), 3, FLEET_H100, RESEARCH_QUOTA)
    assert_figures(rollup_row(RollupScope.FLAVOR, "a100-mig", A100), 3, FLEET_A100)
    assert_figures(rollup_row(RollupScope.FLAVOR, "l4", L4), 3, CQ_C_QUOTA)


def test_team_rows_split_usage_and_quota_with_an_unattributed_bucket(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.TEAM) == {
        ("alpha", "h100"),
        ("beta", "h100"),
        ("beta", "a100-mig"),
        (UNATTRIBUTED, "h100"),
        (UNATTRIBUTED, "l4"),
    }
    alpha = rollup_row(RollupScope.TEAM, "alpha", H100)
    assert_figures(alpha, 3, ALPHA_H100, CQ_A_QUOTA)
    assert alpha.team == scenario.alpha
    beta = rollup_row(RollupScope.TEAM, "beta", H100)
    assert_figures(beta, 3, BETA_H100, CQ_B_QUOTA)
    assert beta.team == scenario.beta
    assert_figures(rollup_row(RollupScope.TEAM, "beta", A100), 3, MIG_A100)
    unattributed = rollup_row(RollupScope.TEAM, UNATTRIBUTED, H100)
    assert_figures(unattributed, 3, NOTEBOOK_H100)
    assert unattributed.team_id is None
    assert_figures(rollup_row(RollupScope.TEAM, UNATTRIBUTED, L4), 3, CQ_C_QUOTA)


def test_cohort_rows_sum_member_queues_including_implicit_cohorts(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.COHORT) == {
        ("research", "h100"),
        ("research", "a100-mig"),
        (UNATTRIBUTED, "h100"),
        (NO_COHORT, "l4"),
    }
    research_usage = {
        figure: ALPHA_H100.get(figure, 0.0) + BETA_H100.get(figure, 0.0) for figure in USAGE_FIGURES
    }
    # Per window: r1 + r2 + r6 + r3 + r4a = 1 + 1 + 2 + 1 + 0.5 in the first two windows.
    research_usage["peak_allocated_gpus"] = 5.5
    assert_figures(
        rollup_row(RollupScope.COHORT, "research", H100), 3, research_usage, RESEARCH_QUOTA
    )
    assert_figures(rollup_row(RollupScope.COHORT, "research", A100), 3, MIG_A100)
    assert_figures(rollup_row(RollupScope.COHORT, UNATTRIBUTED, H100), 3, NOTEBOOK_H100)
    assert_figures(rollup_row(RollupScope.COHORT, NO_COHORT, L4), 3, CQ_C_QUOTA)


def test_cluster_queue_rows_join_usage_with_quota_samples(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.CLUSTER_QUEUE) == {
        ("cq-a", "h100"),
        ("cq-b", "h100"),
        ("cq-b", "a100-mig"),
        ("cq-c", "l4"),
        (UNATTRIBUTED, "h100"),
    }
    cq_a = rollup_row(RollupScope.CLUSTER_QUEUE, "cq-a", H100)
    assert_figures(cq_a, 3, ALPHA_H100, CQ_A_QUOTA)
    assert (cq_a.cluster_queue, cq_a.team) == (scenario.cq_a, scenario.alpha)
    cq_b = rollup_row(RollupScope.CLUSTER_QUEUE, "cq-b", H100)
    assert_figures(cq_b, 3, BETA_H100, CQ_B_QUOTA)
    assert (cq_b.cluster_queue, cq_b.team) == (scenario.cq_b, scenario.beta)
    assert_figures(rollup_row(RollupScope.CLUSTER_QUEUE, "cq-b", A100), 3, MIG_A100)
    cq_c = rollup_row(RollupScope.CLUSTER_QUEUE, "cq-c", L4)
    assert_figures(cq_c, 3, CQ_C_QUOTA)
    assert (cq_c.cluster_queue, cq_c.team) == (scenario.cq_c, None)
    assert_figures(rollup_row(RollupScope.CLUSTER_QUEUE, UNATTRIBUTED, H100), 3, NOTEBOOK_H100)


def test_namespace_local_queue_and_workload_rows_are_keyed_namespace_slash_name(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.NAMESPACE) == {
        ("ns-a", "h100"),
        ("ns-b", "h100"),
        ("ns-b", "a100-mig"),
        ("ns-c", "h100"),
        ("ns-c", "l4"),
    }
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-a", H100), 3, ALPHA_H100)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-b", H100), 3, BETA_H100, WAIT_B)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-c", L4), 0, WAIT_C)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-b", A100), 3, MIG_A100)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-c", H100), 3, NOTEBOOK_H100)

    assert keys_of(RollupScope.LOCAL_QUEUE) == {
        ("ns-a/lq-a", "h100"),
        ("ns-b/lq-b", "h100"),
        ("ns-b/lq-b", "a100-mig"),
        (UNATTRIBUTED, "h100"),
        (UNATTRIBUTED, "l4"),
    }
    assert_figures(rollup_row(RollupScope.LOCAL_QUEUE, "ns-b/lq-b", H100), 3, BETA_H100, WAIT_B)
    assert_figures(rollup_row(RollupScope.LOCAL_QUEUE, UNATTRIBUTED, L4), 0, WAIT_C)
    lq_a = rollup_row(RollupScope.LOCAL_QUEUE, "ns-a/lq-a", H100)
    assert_figures(lq_a, 3, ALPHA_H100)
    assert (lq_a.cluster_queue, lq_a.team) == (scenario.cq_a, scenario.alpha)
    assert_figures(rollup_row(RollupScope.LOCAL_QUEUE, "ns-b/lq-b", A100), 3, MIG_A100)

    assert keys_of(RollupScope.WORKLOAD) == {
        ("ns-a/train", "h100"),
        ("ns-b/infer", "h100"),
        ("ns-b/mig-job", "a100-mig"),
        ("ns-b/wait-b", "h100"),
        ("ns-c/wait-c", "l4"),
        (UNATTRIBUTED, "h100"),
    }
    # A Workload that only waited has a row of its own, with zeros but its pending GPU-hours.
    wait_b = rollup_row(RollupScope.WORKLOAD, "ns-b/wait-b", H100)
    assert_figures(wait_b, 0, WAIT_B)
    assert (wait_b.cluster_queue, wait_b.team) == (scenario.cq_b, scenario.beta)
    assert_figures(rollup_row(RollupScope.WORKLOAD, "ns-c/wait-c", L4), 0, WAIT_C)
    train = rollup_row(RollupScope.WORKLOAD, "ns-a/train", H100)
    assert_figures(train, 3, ALPHA_H100)
    assert (train.workload, train.cluster_queue, train.team) == (
        scenario.train,
        scenario.cq_a,
        scenario.alpha,
    )
    assert_figures(rollup_row(RollupScope.WORKLOAD, "ns-b/infer", H100), 3, BETA_H100)
    mig_job = rollup_row(RollupScope.WORKLOAD, "ns-b/mig-job", A100)
    assert_figures(mig_job, 3, MIG_A100)
    assert mig_job.workload == scenario.mig_job
    notebook = rollup_row(RollupScope.WORKLOAD, UNATTRIBUTED, H100)
    assert_figures(notebook, 3, NOTEBOOK_H100)
    assert notebook.workload_id is None


def test_window_ending_on_the_hour_belongs_to_the_hour_before(scenario):
    roll_up_hour(scenario.cluster.pk, H1)

    # Hour 13 holds only the windows ending 13:01 and 13:02: gpu0 (held) and gpu4 (free).
    assert_figures(
        rollup_row(RollupScope.FLEET, "test", H100, hour=H1),
        2,
        {
            "capacity_gpu_hours": 2 * 2 * W,
            "allocated_gpu_hours": 1 * 2 * W,
            "telemetry_gpu_hours": 1 * 2 * W,
            "active_gpu_hours": 0.8 * 2 * W,
            "tensor_active_gpu_hours": 0.4 * 2 * W,
            "tensor_covered_gpu_hours": 1 * 2 * W,
            "gpu_util_gpu_hours": 0.9 * 2 * W,
            "gpu_util_covered_gpu_hours": 1 * 2 * W,
            "peak_allocated_gpus": 1,
            "nominal_gpu_hours": 4 * 1 * W,
            "borrowed_gpu_hours": 9 * 1 * W,
        },
    )
    assert keys_of(RollupScope.FLEET, hour=H1) == {("test", "h100")}


def test_idle_and_busy_thresholds_come_from_settings(scenario, settings):
    settings.GPULEDGER_IDLE_THRESHOLD = 0.2
    settings.GPULEDGER_BUSY_GPU_UTIL = 55
    settings.GPULEDGER_BUSY_SM_ACTIVE = 0.9

    roll_up_hour(scenario.cluster.pk, H0)

    h100 = rollup_row(RollupScope.FLEET, "test", H100)
    # Below 0.2: r2 (0.1) and r3 (0.005); r5 (0.0) is not held.
    assert h100.idle_gpu_hours == pytest.approx((1 + 1) * 3 * W)
    # GPU_UTIL ≥ 55 and SM < 0.9: r1 (90, 0.8), r2 (80, 0.1), r4a + r4b (70, 0.6); r3 has 0.
    assert h100.busy_not_working_gpu_hours == pytest.approx((1 + 1 + 0.5 + 0.5) * 3 * W)
    # r7 has GPU_UTIL 60 but no SM_ACTIVE (GR_ENGINE_ACTIVE 0.5 only): never busy-not-working.
    assert rollup_row(RollupScope.FLEET, "test", A100).busy_not_working_gpu_hours == 0


def test_usage_figures_of_every_scope_sum_to_the_fleet(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    def totals(scope: str, figures: list[str]) -> dict[str, float]:
        found = HourlyRollup.objects.filter(scope=scope, hour=H0).aggregate(
            **{figure: Sum(figure) for figure in figures}
        )
        return {figure: found[figure] or 0.0 for figure in figures}

    usage = [figure for figure in USAGE_FIGURES if figure != "capacity_gpu_hours"]
    fleet_usage = totals(RollupScope.FLEET, usage)
    assert fleet_usage["allocated_gpu_hours"] > 0
    for scope in ("team", "namespace", "cohort", "cluster_queue", "local_queue", "workload"):
        assert totals(scope, usage) == pytest.approx(fleet_usage, rel=1e-9), scope
    for scope in ("node", "flavor"):
        assert totals(scope, USAGE_FIGURES) == pytest.approx(
            totals(RollupScope.FLEET, USAGE_FIGURES), rel=1e-9
        )
    fleet_quota = totals(RollupScope.FLEET, QUOTA_FIGURES)
    assert fleet_quota["nominal_gpu_hours"] > 0
    for scope in ("team", "cohort", "cluster_queue", "flavor"):
        assert totals(scope, QUOTA_FIGURES) == pytest.approx(fleet_quota, rel=1e-9), scope
    fleet_pending = totals(RollupScope.FLEET, ["pending_gpu_hours"])
    assert fleet_pending["pending_gpu_hours"] > 0
    for scope in ("namespace", "local_queue", "workload"):
        assert totals(scope, ["pending_gpu_hours"]) == pytest.approx(fleet_pending), scope

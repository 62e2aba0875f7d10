"""The what-if of a quota change, against the fixture scenario (README "Cluster and quotas",
"Workloads" and "Expected derived figures"); every expected value is worked out by hand here."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from quotas.models import ClusterQueue
from quotas.sync import sync_cluster
from quotas.writeback.edits import Cell, live_cells
from quotas.writeback.state import whatif_inputs
from quotas.writeback.whatif import NO_EVICTION_NOTE, what_if

GPU = "nvidia.com/gpu"


@pytest.fixture
def synced(kube_api: Any, kube_cluster: Any) -> Any:
    sync_cluster(kube_cluster.pk)
    return kube_api


def _summary(api: Any, name: str, **nominal: str) -> dict[str, Any]:
    before = live_cells(api.get("ClusterQueue", name))
    after = [
        Cell(c.flavor, c.resource, nominal[c.flavor], c.borrowing_limit, c.lending_limit)
        if c.resource == GPU and c.flavor in nominal
        else c
        for c in before
    ]
    queue = ClusterQueue.objects.get(name=name)
    return what_if(whatif_inputs(queue, before, after, timezone.now()))


@pytest.mark.parametrize(
    ("queue", "admissible"),
    [
        # README "GPUs still admissible now".
        ("team-a", {"h100": 0, "a100": 16}),
        ("team-b", {"h100": 2, "a100": 8}),
        ("team-c", {"h100": 0, "a100": 7}),
        ("serving", {"h100": 2}),
        ("batch", {"h100": 2, "a100": 0}),
    ],
)
def test_room_now_is_what_the_readme_says_kueue_would_admit(
    synced: Any, queue: str, admissible: dict[str, float]
) -> None:
    summary = _summary(synced, queue)
    assert {flavor: room["before"] for flavor, room in summary["admissible"].items()} == (
        pytest.approx(admissible)
    )


def test_lowering_nominal_lists_admitted_workloads_that_become_borrowers(synced: Any) -> None:
    # team-a h100: A1 (8) then A2 (12) admitted, 20 in use. At nominal 16, A2 borrows 4.
    # At 8, A1 fills the quota exactly and A2 is 12 above it. Nothing is evicted.
    summary = _summary(synced, "team-a", h100="8")
    before = [(b["name"], b["above_nominal"]) for b in summary["borrowers_before"]]
    after = [(b["name"], b["above_nominal"], b["new"]) for b in summary["borrowers_after"]]
    assert before == [("team-a/jobset-mixtral-ft-7f630", 4)]
    assert after == [("team-a/jobset-mixtral-ft-7f630", 12, False)]
    # team-b and team-c reclaim with policy Any; only team-b has a pending workload (B2).
    assert summary["borrowers_after"][0]["reclaimable_by"] == [
        {"queue": "team-b", "policy": "Any", "pending_now": True},
        {"queue": "team-c", "policy": "Any", "pending_now": False},
    ]
    assert summary["note"] == NO_EVICTION_NOTE
    # team-a lends at most its lendingLimit 8 of h100, before and after (8 ≤ 8).
    assert summary["lendable"][0] == {"flavor": "h100", "before": 8, "after": 8, "delta": 0}


def test_raising_nominal_lists_the_pending_workloads_that_would_fit(synced: Any) -> None:
    # team-a h100 at 28: guaranteed 28 - 8 = 20, all in use; the cohort's h100 is team-a 8 +
    # team-b 4 + team-c 4 lendable minus team-c's 4 above its guaranteed 4 = 12 left, capped by
    # 28 + 8 - 20 = 16: room 12. A3 (8, priority 500, h100 only) fits within nominal (28);
    # then A5 (4) has min(12 - 8 = 4, 28 + 8 - 28 = 8) = 4: fits by borrowing. Before: none.
    summary = _summary(synced, "team-a", h100="28")
    assert summary["admissible"]["h100"] == {"before": 0, "after": 12}
    assert [(p["name"], p["before"], p["after"]) for p in summary["pending"]] == [
        ("team-a/job-llama-eval-70b-755d0", "", "nominal"),
        ("team-a/job-lr-sweep-17-62ba9", "", "borrowing"),
    ]
    assert summary["borrowers_after"] == []


def test_a_queue_without_a_cohort_only_counts_its_own_quota(synced: Any) -> None:
    from quotas.writeback.whatif import Limits, WhatIfInputs, WorkloadView

    inputs = WhatIfInputs(
        queue="solo",
        cohort="",
        flavor_order=["h100"],
        before={"h100": Limits(4)},
        after={"h100": Limits(10)},
        admitted=[WorkloadView("ns/a", 0, 4, "h100")],
        pending=[WorkloadView("ns/b", 0, 8), WorkloadView("ns/c", 0, 6)],
    )
    summary = what_if(inputs)
    # 10 - 4 = 6 free: b (8) does not fit, c (6) does.
    assert [(p["name"], p["after"]) for p in summary["pending"]] == [
        ("ns/b", ""),
        ("ns/c", "nominal"),
    ]
    assert summary["lendable"] == []

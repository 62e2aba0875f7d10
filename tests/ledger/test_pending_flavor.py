"""Pending GPU-hours go to the flavor a workload waits for, not its ClusterQueue's first flavor.

One hour (H0 = 12:00-13:00 UTC), one ClusterQueue ``cq`` of team ``red`` whose GPU flavors are
h100 (tried first) then a100, with MIG quota of flavor a100-mig. By hand, every workload created
at 12:00 and waiting (no Kueue sync yet: counted to the hour's end):

- ``wait-a100``: 8 GPUs, Kueue says "insufficient unused quota for nvidia.com/gpu in flavor a100,
  8 more needed": 8 GPU-h of a100 (the first flavor, h100, would be wrong).
- ``wait-any``: 2 GPUs, no message naming a flavor: 2 GPU-h of h100, where Kueue tries first.
- ``waited-a100``: 4 GPUs, quota reserved at 12:30 on a100 (``flavors``), admitted since:
  4 × 0.5 = 2 GPU-h of a100.
- ``wait-mig``: 1 mig-1g instance (1/7 GPU), Kueue names flavor a100-mig: 1/7 GPU-h of a100-mig.

So a100 10 GPU-h, h100 2, a100-mig 1/7: the flavor, team and ClusterQueue rollup rows, and the
chargeback API by flavor, say the same.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models import Sum
from django.test import Client
from django.urls import reverse

from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.rollup import roll_up_hour
from ledger.rollup.pending import pending_rows
from quotas.choices import TransitionKind, WorkloadState
from quotas.models import ClusterQueue, ClusterQueueQuota, Team, Workload, WorkloadTransition

H0 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
EXPECTED = {"a100": 10.0, "h100": 2.0, "a100-mig": 1 / 7}


def short(resource: str, flavor: str, more: float) -> str:
    return (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        f"{resource} in flavor {flavor}, {more:g} more needed"
    )


@pytest.fixture
def waiting(cluster):
    red = Team.objects.create(name="red")
    cq = ClusterQueue.objects.create(cluster=cluster, name="cq", team=red)
    for flavor, resource, position in (
        ("a100", GPU, 1),
        ("h100", GPU, 0),
        ("a100-mig", MIG_1G, 0),
    ):
        ClusterQueueQuota.objects.create(
            cluster_queue=cq, flavor_name=flavor, resource=resource, position=position, nominal=1
        )

    def workload(name, requested, state=WorkloadState.PENDING, **extra):
        return Workload.objects.create(
            cluster=cluster,
            namespace="red-ns",
            name=name,
            cluster_queue=cq,
            requested_gpus=requested,
            observed_at=H0,
            state=state,
            **extra,
        )

    workload("wait-a100", 8, state_message=short(GPU, "a100", 8))
    workload("wait-any", 2, state_message="Workload is inadmissible: backoff")
    reserved = H0 + timedelta(minutes=30)
    waited = workload(
        "waited-a100",
        4,
        state=WorkloadState.ADMITTED,
        quota_reserved_at=reserved,
        admitted_gpus=4,
        flavors={GPU: "a100"},
        state_message="The workload is admitted",
    )
    WorkloadTransition.objects.create(
        workload=waited, kind=TransitionKind.QUOTA_RESERVED, at=reserved
    )
    workload("wait-mig", 1 / 7, state_message=short(MIG_1G, "a100-mig", 1))
    return cluster


def by_flavor(rows, scope: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for row in rows:
        if row["scope"] == scope:
            found[row["flavor"]] = found.get(row["flavor"], 0.0) + row["pending_gpu_hours"]
    return found


def test_pending_rows_count_each_workload_on_the_flavor_it_waits_for(waiting):
    rows = pending_rows(waiting, H0, None)

    for scope in (RollupScope.FLAVOR, RollupScope.TEAM, RollupScope.CLUSTER_QUEUE):
        assert by_flavor(rows, scope) == pytest.approx(EXPECTED), scope
    workloads = {
        row["key"]: (row["flavor"], row["pending_gpu_hours"])
        for row in rows
        if row["scope"] == RollupScope.WORKLOAD
    }
    assert workloads == {
        "red-ns/wait-a100": ("a100", pytest.approx(8.0)),
        "red-ns/wait-any": ("h100", pytest.approx(2.0)),
        "red-ns/waited-a100": ("a100", pytest.approx(2.0)),
        "red-ns/wait-mig": ("a100-mig", pytest.approx(1 / 7)),
    }


def test_the_rolled_up_hour_and_the_chargeback_agree_per_flavor(waiting):
    roll_up_hour(waiting.pk, H0)

    stored = dict(
        HourlyRollup.objects.filter(scope=RollupScope.FLAVOR, hour=H0)
        .values_list("key")
        .annotate(pending=Sum("pending_gpu_hours"))
    )
    assert stored == pytest.approx(EXPECTED)

    client = Client()
    client.force_login(User.objects.create_user("staff", password="x", is_staff=True))
    window = {"start": H0.isoformat(), "end": (H0 + timedelta(hours=1)).isoformat()}
    for group_by, expected in (
        ("flavor", EXPECTED),
        ("team", {"red": sum(EXPECTED.values())}),
    ):
        response = client.get(reverse("api-chargeback"), {**window, "group_by": group_by})
        assert response.status_code == 200, response.content[:300]
        charged = {row["group"]: row["pending_gpu_hours"] for row in response.json()["rows"]}
        assert charged == pytest.approx(expected), group_by

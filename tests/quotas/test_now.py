"""Queue figures "now" (quotas.now): one answer for the pages and /api/v1/cluster-queues/.

Admitted and pending GPUs now are counted from the workloads, nominal from the spec (MIG at
slices/7), borrowed and lent from the newest fresh samples. Clock at ``NOW``; samples count
"now" when they are the newest of their (queue, flavor, resource) and at most 15 minutes old
(``GPULEDGER_COLLECT_SECONDS`` = 60). By hand:

- cq-a (team red): h100 GPU samples 30 min ago (borrowed 9: stale), 2 min ago (borrowed 2),
  1 min ago (total 11, borrowed 3, nominal 8, pending 1); a100 GPU 1 min ago (total 5,
  borrowed 1, nominal 4, pending 2); an h100 cpu sample (borrowed 99, not GPUs); a sample
  stamped after now (ignored). Now: total 16, borrowed 3 + 1 = 4, nominal 12, pending 3.
- cq-b (team red): one sample 20 min ago: no borrowed or lent now ("—" on the page, null in
  the API); its admitted and pending GPUs, counted from its workloads, are still there.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db.models import Q
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from quotas.choices import TransitionKind, WorkloadState
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Team,
    Workload,
    WorkloadTransition,
)
from quotas.now import (
    eviction_pace,
    gpu_quotas,
    holding_gpus,
    latest_samples,
    nominal_gpus,
    quota_gpus,
)

NOW = datetime(2026, 5, 4, 12, 0, 30, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


@pytest.fixture
def queues(cluster, settings):
    settings.GPULEDGER_COLLECT_SECONDS = 60
    red = Team.objects.create(name="red")
    cq_a = ClusterQueue.objects.create(cluster=cluster, name="cq-a", team=red)
    cq_b = ClusterQueue.objects.create(cluster=cluster, name="cq-b", team=red)

    def sample(queue, flavor, at, resource=GPU, **values):
        ClusterQueueSample.objects.create(
            cluster_queue=queue,
            flavor_name=flavor,
            resource=resource,
            sampled_at=at,
            **{name: Decimal(str(value)) for name, value in values.items()},
        )

    sample(cq_a, "h100", ago(minutes=30), total=20, borrowed=9, nominal=8)
    sample(cq_a, "h100", ago(minutes=2), total=10, borrowed=2, nominal=8)
    sample(cq_a, "h100", ago(minutes=1), total=11, borrowed=3, nominal=8, pending_demand=1)
    sample(cq_a, "a100", ago(minutes=1), total=5, borrowed=1, nominal=4, pending_demand=2)
    sample(cq_a, "h100", ago(minutes=1), resource="cpu", total=64, borrowed=99, nominal=32)
    sample(cq_a, "h100", NOW + timedelta(minutes=1), total=50, borrowed=50, nominal=8)
    sample(cq_b, "h100", ago(minutes=20), total=3, borrowed=5, nominal=2)
    return {"red": red, "cq_a": cq_a, "cq_b": cq_b}


def test_latest_samples_are_the_newest_fresh_gpu_samples(queues):
    found = latest_samples(Q(cluster_queue__team=queues["red"]), NOW)

    assert set(found) == {queues["cq_a"].pk}  # cq-b's only sample is stale
    now = found[queues["cq_a"].pk]
    assert (now.total, now.borrowed, now.lent, now.nominal, now.pending) == (16, 4, 0, 12, 3)
    assert now.sampled_at == ago(minutes=1)
    assert now.flavors["h100"]["borrowed"] == 3
    assert now.flavors["a100"]["total"] == 5


@pytest.fixture
def staff(db):
    return User.objects.create_user("staff", password="x", is_staff=True)


def api_queue(staff, name: str) -> dict:
    client = APIClient()
    client.force_authenticate(staff)
    with time_machine.travel(NOW, tick=False):
        response = client.get("/api/v1/cluster-queues/", {"name": name})
    assert response.status_code == 200, response.content
    return response.json()["results"][0]


MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


@pytest.fixture
def holdings(queues, cluster):
    """Quotas and workloads now, by hand.

    cq-a: quota h100 8 GPUs, a100 4 GPUs + 7 × mig-1g (1 GPU) + 2 × mig-3g (6/7 GPU), cpu 32
    (not GPUs): nominal 13 6/7 GPUs. Workloads: admitted 4 GPUs, quota reserved 2, admitted
    one mig-3g instance (3/7), admitted 16 but deleted (gone), pending 8, pending without GPUs:
    admitted now 6 3/7 GPUs (3 workloads), pending 8 GPUs (2 workloads).
    cq-b (no fresh sample): no quota; admitted 3 GPUs, pending 2: its "now" still has them.
    """
    cq_a, cq_b = queues["cq_a"], queues["cq_b"]
    for flavor, resource, nominal in (
        ("h100", GPU, 8),
        ("a100", GPU, 4),
        ("a100", MIG_1G, 7),
        ("a100", MIG_3G, 2),
        ("h100", "cpu", 32),
    ):
        ClusterQueueQuota.objects.create(
            cluster_queue=cq_a, flavor_name=flavor, resource=resource, nominal=nominal
        )

    def workload(queue, name, state, admitted=0.0, requested=0.0, **extra):
        Workload.objects.create(
            cluster=cluster,
            namespace="red-ns",
            name=name,
            cluster_queue=queue,
            state=state,
            admitted_gpus=admitted,
            requested_gpus=requested,
            **extra,
        )

    workload(cq_a, "a1", WorkloadState.ADMITTED, 4, 4)
    workload(cq_a, "a2", WorkloadState.QUOTA_RESERVED, 2, 2)
    workload(cq_a, "a3", WorkloadState.ADMITTED, 3 / 7, 3 / 7, flavors={MIG_3G: "a100"})
    workload(cq_a, "a4", WorkloadState.ADMITTED, 16, 16, deleted_at=ago(hours=1))
    workload(cq_a, "p1", WorkloadState.PENDING, requested=8)
    workload(cq_a, "p2", WorkloadState.PENDING)
    workload(cq_b, "b1", WorkloadState.ADMITTED, 3, 3)
    workload(cq_b, "b2", WorkloadState.PENDING, requested=2)
    return queues


def test_the_api_now_counts_workloads_and_takes_borrowed_from_samples(holdings, staff):
    expected = latest_samples(Q(cluster_queue=holdings["cq_a"]), NOW)[holdings["cq_a"].pk]

    item = api_queue(staff, "cq-a")

    assert item["gpus_now"]["borrowed"] == expected.borrowed == 4
    assert item["gpus_now"] == {
        "sampled_at": "2026-05-04T11:59:30Z",
        "total": pytest.approx(6 + 3 / 7),
        "borrowed": 4.0,
        "lent": 0.0,
        "nominal": pytest.approx(13 + 6 / 7),
        "pending": 8.0,
    }
    # Every resource's newest fresh sample, in flavor and resource order.
    assert [(u["flavor_name"], u["resource"], u["borrowed"]) for u in item["usage"]] == [
        ("a100", GPU, "1.000000"),
        ("h100", "cpu", "99.000000"),
        ("h100", GPU, "3.000000"),
    ]


def test_a_queue_without_a_fresh_sample_still_counts_its_workloads(holdings, staff):
    item = api_queue(staff, "cq-b")

    assert item["gpus_now"] == {
        "sampled_at": None,
        "total": 3.0,
        "borrowed": None,
        "lent": None,
        "nominal": 0.0,
        "pending": 2.0,
    }
    assert item["usage"] == []


def test_the_queue_page_and_the_api_agree_on_now(holdings, staff, cluster):
    client = Client()
    client.force_login(staff)

    for name, expected in (
        ("cq-a", {"borrowed": "4", "usage": "6.4", "pending": "8", "nominal": "13.9"}),
        ("cq-b", {"borrowed": "—", "usage": "3", "pending": "2", "nominal": "0"}),
    ):
        url = reverse("dashboard:cluster-queue-detail", args=[cluster.name, name])
        with time_machine.travel(NOW, tick=False):
            response = client.get(url)
        stats = {s["testid"]: s["value"] for s in response.context["stats"] if s.get("testid")}
        api = api_queue(staff, name)["gpus_now"]

        assert {key: stats[f"stat-{key}"] for key in expected} == expected
        assert (api["borrowed"], round(api["total"], 1), api["pending"]) == (
            4.0 if name == "cq-a" else None,
            float(expected["usage"]),
            float(expected["pending"]),
        )
        assert round(api["nominal"], 1) == float(expected["nominal"])


def test_holding_gpus_count_admitted_and_reserved_workloads_only(queues, cluster):
    def workload(name, state, admitted, **extra):
        return Workload.objects.create(
            cluster=cluster,
            namespace="red-ns",
            name=name,
            cluster_queue=queues["cq_a"],
            state=state,
            admitted_gpus=admitted,
            requested_gpus=admitted or 8,
            **extra,
        )

    workload("w1", WorkloadState.ADMITTED, 4)
    workload("w2", WorkloadState.QUOTA_RESERVED, 2)
    workload("w3", WorkloadState.PENDING, 0)
    workload("w4", WorkloadState.ADMITTED, 16, deleted_at=ago(hours=1))

    held = holding_gpus(Q(cluster_queue__team=queues["red"]), "cluster_queue_id")

    assert held == {queues["cq_a"].pk: 6.0}


def test_gpu_quotas_are_per_queue_whole_gpus_first_in_flavor_order(queues):
    cq_a = queues["cq_a"]
    for flavor, resource, position, nominal in (
        ("a100", MIG_3G, 0, 2),
        ("a100", GPU, 1, 4),
        ("h100", GPU, 0, 8),
        ("h100", "cpu", 0, 32),
        ("a100", "nvidia.com/mig-unknown", 0, 5),
    ):
        ClusterQueueQuota.objects.create(
            cluster_queue=cq_a,
            flavor_name=flavor,
            resource=resource,
            position=position,
            nominal=nominal,
        )

    quotas = gpu_quotas(Q(cluster_queue__team=queues["red"]))[cq_a.pk]

    assert [(q.flavor_name, q.resource, q.nominal) for q in quotas] == [
        ("h100", GPU, 8),
        ("a100", GPU, 4),
        ("a100", MIG_3G, 2),
    ]
    # In GPUs: a 3g instance is 3/7 of one.
    assert [quota_gpus(q) for q in quotas] == [8.0, 4.0, pytest.approx(6 / 7)]
    assert nominal_gpus(quotas) == pytest.approx(12 + 6 / 7)


def test_eviction_pace_is_the_median_readmission_and_evictions_per_busy_hour(queues, cluster):
    def workload(name):
        return Workload.objects.create(
            cluster=cluster, namespace="red-ns", name=name, cluster_queue=queues["cq_a"]
        )

    victim_1, victim_2, preemptor = workload("v1"), workload("v2"), workload("p")
    transition = WorkloadTransition.objects.create
    # Preempted at 09:00:30 and 10:00:30; the preemptor is admitted 10 and 20 minutes later.
    transition(workload=victim_1, kind=TransitionKind.PREEMPTED, at=ago(hours=3),
               preemptor=preemptor)  # fmt: skip
    transition(workload=preemptor, kind=TransitionKind.ADMITTED, at=ago(hours=3, minutes=-10))
    transition(workload=victim_2, kind=TransitionKind.PREEMPTED, at=ago(hours=2),
               preemptor=preemptor)  # fmt: skip
    transition(workload=preemptor, kind=TransitionKind.ADMITTED, at=ago(hours=2, minutes=-20))
    transition(workload=victim_2, kind=TransitionKind.EVICTED, at=ago(hours=2, minutes=-30))
    # Older than the 30-day look-back: not counted.
    transition(workload=victim_1, kind=TransitionKind.EVICTED, at=ago(days=40))

    pace = eviction_pace(Q(workload__cluster_queue=queues["cq_a"]), NOW)

    assert pace["admission_seconds"] == 900  # median of 600 and 1200
    assert pace["admission_samples"] == 2
    assert pace["evictions"] == 3
    assert pace["active_hours"] == 2  # 09:00 and 10:00
    assert pace["per_hour"] == 1.5

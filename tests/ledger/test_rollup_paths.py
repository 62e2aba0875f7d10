"""Hourly rollups outside the hand-worked hour: windows without telemetry, the hours a window
touches, and PostgreSQL's fast path against the portable one on random hours."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

import pytest

from fleet.models import Cluster
from ledger import rollup
from ledger.choices import RollupScope
from ledger.models import GpuUsage
from ledger.rollup import (
    hours_touched,
    roll_up_hour,
)
from quotas.models import (
    ClusterQueue,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    Workload,
)
from tests.ledger.rollup_scenario import (
    A100,
    ALL_FIGURES,
    H0,
    H1,
    H100,
    MINUTE,
    W,
    rollup_row,
    sample,
    snapshot,
    usage_row,
)


def test_allocated_gpus_without_telemetry_are_no_data_never_idle(cluster):
    end = H0 + MINUTE
    GpuUsage.objects.bulk_create(
        [usage_row(cluster, end, "", namespace="ns", pod="p", gpus=4.0, capacity_gpus=0.0)]
    )

    roll_up_hour(cluster.pk, H0)

    row = rollup_row(RollupScope.NAMESPACE, "ns", H100)
    assert row.allocated_gpu_hours == pytest.approx(4 * W)
    assert (row.telemetry_gpu_hours, row.idle_gpu_hours, row.active_gpu_hours) == (0, 0, 0)
    assert row.telemetry_coverage == 0
    assert row.utilization is None


def test_hours_touched_puts_a_window_in_the_hour_of_its_start():
    ends = [
        H0 + MINUTE,
        H1,  # (12:59, 13:00] is hour 12's
        H0 + 30 * MINUTE,
        H1 + timedelta(microseconds=1),
        H1 + timedelta(hours=2),
    ]

    assert hours_touched(ends) == [H0, H1, H1 + timedelta(hours=1)]


def test_hours_touched_refuses_naive_times():
    with pytest.raises(ValueError, match="naive"):
        hours_touched([datetime(2025, 3, 10, 12, 1)])  # noqa: DTZ001


def random_hour(cluster: Cluster, rng: random.Random, mixed_lengths: bool) -> None:
    """Usage and queue samples around H0 with every case the figures distinguish, at random."""
    teams = [Team.objects.create(name=f"team-{index}") for index in range(3)]
    cohort = Cohort.objects.create(cluster=cluster, name="research")
    queues = [
        ClusterQueue.objects.create(cluster=cluster, name="cq-0", team=teams[0], cohort=cohort),
        ClusterQueue.objects.create(
            cluster=cluster, name="cq-1", team=teams[1], cohort_name="research"
        ),
        ClusterQueue.objects.create(cluster=cluster, name="cq-2", team=teams[2], cohort_name="ml"),
        ClusterQueue.objects.create(cluster=cluster, name="cq-3"),
    ]
    local_queues = [
        LocalQueue.objects.create(
            cluster=cluster,
            namespace=f"ns-{index}",
            name="lq",
            cluster_queue=queue,
            cluster_queue_name=queue.name,
        )
        for index, queue in enumerate(queues)
    ]
    local_queues.append(
        LocalQueue.objects.create(
            cluster=cluster, namespace="ns-x", name="lq", cluster_queue_name="gone"
        )
    )
    workloads = [
        Workload.objects.create(
            cluster=cluster,
            namespace=local_queue.namespace,
            name=f"job-{index}",
            cluster_queue=local_queue.cluster_queue,
            local_queue=local_queue,
        )
        for index, local_queue in enumerate(local_queues * 2)
    ]
    ResourceFlavor.objects.create(cluster=cluster, name="a100", gpu_model="NVIDIA-A100")

    def holder() -> dict[str, object]:
        if rng.random() < 0.15:  # a pod outside Kueue
            return {"namespace": rng.choice(["ns-0", "notebooks", ""])}
        workload = rng.choice(workloads)
        fields: dict[str, object] = {
            "namespace": workload.namespace,
            "workload": workload,
            "local_queue": workload.local_queue,
            "cluster_queue": workload.cluster_queue,
            "team": workload.cluster_queue.team if workload.cluster_queue else None,
        }
        if rng.random() < 0.1:  # attribution that disagrees with the workload's own
            fields["team"] = rng.choice([*teams, None])
        return fields

    slots = [
        {
            "gpu_key": f"g{index}",
            "node_name": rng.choice(["node-1", "node-2", "node-3", ""]),
            "flavor": rng.choice([H100, A100, ("", ""), ("h100", "NVIDIA-H100-PCIE")]),
            "gpus": rng.choice([1.0, 1.0, 0.5, 3 / 7, 2.0]),
            "holder": holder(),
        }
        for index in range(30)
    ]
    ends = [H0 + minutes * MINUTE for minutes in (1, 2, 3, 5, 8, 13, 21, 60)]
    rows = []
    for end in [H0, *ends, H1 + MINUTE]:
        for slot in slots:
            if rng.random() < 0.15:
                continue
            if rng.random() < 0.1:
                slot["holder"] = holder()  # a new pod from this window on
            allocated = rng.random() < 0.8
            telemetry = rng.choice(["sm", "sm", "sm", "gr", "none"])
            sm = rng.choice([0.0, 0.005, 0.1, 0.15, 0.5, 0.9])
            fields: dict[str, object] = {
                "node_name": slot["node_name"],
                "flavor": slot["flavor"],
                "allocated": allocated,
                "gpus": slot["gpus"],
                "capacity_gpus": rng.choice([slot["gpus"], slot["gpus"], 0.0]),
                "shared": rng.random() < 0.2,
                "pipe_tensor_active": rng.choice([None, 0.0, 0.3]),
                "gpu_util": rng.choice([None, 0.0, 45.0, 50.0, 95.0]),
                **(slot["holder"] if allocated else {}),
            }
            if telemetry == "sm":
                fields["sm"] = sm
            elif telemetry == "gr":
                fields["gr"] = sm
            row = usage_row(cluster, end, slot["gpu_key"], pod=slot["gpu_key"], **fields)
            if mixed_lengths and rng.random() < 0.2:
                row.window_start = end - 2 * MINUTE
            rows.append(row)
    GpuUsage.objects.bulk_create(rows)

    samples = []
    for end in ends:
        for queue in queues:
            for flavor in ("h100", "a100", "l4"):
                if rng.random() < 0.7:
                    samples.append(
                        sample(
                            queue,
                            flavor,
                            end,
                            nominal=rng.randint(0, 8),
                            borrowed=rng.randint(0, 2),
                            lent=rng.randint(0, 2),
                            pending_demand=rng.randint(0, 3),
                        )
                    )
    ClusterQueueSample.objects.bulk_create(samples)


def rollups_by_identity() -> dict[tuple, tuple]:
    return {row[:5]: row[5:] for row in snapshot()}


@pytest.mark.postgresql(reason="the fast path is PostgreSQL's; SQLite has one path")
@pytest.mark.parametrize("mixed_lengths", [False, True], ids=["one-length", "mixed-lengths"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_postgresql_fast_path_writes_the_figures_of_the_portable_path(
    cluster, monkeypatch, seed, mixed_lengths
):
    # Given a random hour (and windows of two lengths ending together, in one variant)
    random_hour(cluster, random.Random(seed), mixed_lengths)

    # When the hour is rolled up by each path
    fast_written = roll_up_hour(cluster.pk, H0)
    fast = rollups_by_identity()
    monkeypatch.setattr(rollup.postgres, "FAST_PATH_VENDORS", ())
    portable_written = roll_up_hour(cluster.pk, H0)
    portable = rollups_by_identity()

    # Then both wrote the same rows with the same figures (sums may differ in the last bits)
    assert fast_written == portable_written == len(portable) > 50
    assert fast.keys() == portable.keys()
    for identity, values in portable.items():
        # team, queue and workload ids, then the figures, then windows
        assert fast[identity][:3] == values[:3], identity
        assert fast[identity][-1] == values[-1], identity
        figures = zip(ALL_FIGURES, values[3:-1], fast[identity][3:-1], strict=True)
        for name, expected, actual in figures:
            assert math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12), (identity, name)

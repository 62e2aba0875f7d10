"""The join's models moved apps (fleet/quotas → ledger/quotas) without touching a row.

A database created before the move (fleet 0003, quotas 0001) is filled through the historical
models, migrated forward, and read back through today's models: every row is still there with
the same values, and the chargeback answers what the rows say.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE_MOVE = [
    ("fleet", "0003_alter_gpuusage_cluster_alter_gpuusage_cluster_queue_and_more"),
    ("quotas", "0001_initial"),
]
HOUR = datetime(2026, 3, 2, 10, tzinfo=UTC)


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


@pytest.fixture
def before_move():
    old_apps = _migrate(BEFORE_MOVE)
    yield old_apps
    _migrate(_latest())


@pytest.mark.django_db(transaction=True)
def test_an_existing_database_keeps_every_row_and_its_chargeback(before_move):
    # Given a database at the last migrations before the move, filled through the old models
    old = before_move
    cluster = old.get_model("fleet", "Cluster").objects.create(name="c1")
    node = old.get_model("fleet", "Node").objects.create(cluster=cluster, name="n1", gpu_capacity=2)
    gpu = old.get_model("fleet", "Gpu").objects.create(
        cluster=cluster, node=node, host="n1", uuid="GPU-1"
    )
    team = old.get_model("quotas", "Team").objects.create(name="vision")
    queue = old.get_model("quotas", "ClusterQueue").objects.create(
        cluster=cluster, name="cq-vision", team=team
    )
    workload = old.get_model("quotas", "Workload").objects.create(
        cluster=cluster, namespace="ns", name="train", cluster_queue=queue
    )
    allocation = old.get_model("fleet", "Allocation").objects.create(
        cluster=cluster,
        namespace="ns",
        pod="train-0",
        node=node,
        gpus=1.0,
        workload=workload,
        started_at=HOUR,
    )
    allocation.gpu_devices.add(gpu)
    old.get_model("fleet", "GpuUsage").objects.create(
        cluster=cluster,
        window_start=HOUR,
        window_end=HOUR + timedelta(minutes=15),
        gpu=gpu,
        gpu_key="n1/GPU-1/",
        namespace="ns",
        pod="train-0",
        workload=workload,
        cluster_queue=queue,
        team=team,
        allocated=True,
        gpus=1.0,
        capacity_gpus=1.0,
        activity=0.25,
    )
    rollup = old.get_model("fleet", "HourlyRollup")
    for offset, allocated in enumerate((3.0, 5.0)):
        rollup.objects.create(
            cluster=cluster,
            scope="team",
            key="vision",
            team=team,
            hour=HOUR + timedelta(hours=offset),
            allocated_gpu_hours=allocated,
            telemetry_gpu_hours=allocated,
            active_gpu_hours=allocated / 2,
        )
    old.get_model("quotas", "RateCard").objects.create(
        price_per_gpu_hour=Decimal("2.5"),
        currency="USD",
        effective_from=HOUR - timedelta(days=1),
    )

    # When it migrates forward to today's models
    _migrate(_latest())

    # Then every row is there, under its new app, with its values and relations
    from ledger import chargeback
    from ledger.models import GpuUsage, HourlyRollup, RateCard
    from quotas.models import Allocation

    moved = Allocation.objects.get()
    assert (moved.pod, moved.gpus, moved.workload.name, moved.node.name) == (
        "train-0",
        1.0,
        "train",
        "n1",
    )
    assert [g.uuid for g in moved.gpu_devices.all()] == ["GPU-1"]
    usage = GpuUsage.objects.get()
    assert (usage.activity, usage.team.name, usage.gpu.uuid) == (0.25, "vision", "GPU-1")
    assert HourlyRollup.objects.count() == 2
    assert RateCard.objects.get().price_per_gpu_hour == Decimal("2.5")

    report = chargeback.build_report(
        start=HOUR, end=HOUR + timedelta(hours=2), group_by="team", step="none"
    )
    row = next(row for row in report.rows if row.group == "vision")
    assert row.figures.allocated_gpu_hours == pytest.approx(8.0)
    assert row.figures.active_gpu_hours == pytest.approx(4.0)
    # 8 allocated GPU-hours at the default card's 2.50 (usage model).
    assert row.figures.cost_allocated == Decimal("20.0")

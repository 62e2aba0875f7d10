"""Figures that two pages (or a page and a setting) told differently, each made one answer.

Each test sets up the smallest data that shows the contradiction and derives the expected figure
by hand; docs/architecture.md "Figures" says which reading was chosen and why.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from core.ranges import HourSpan, TimeRange
from dashboard.fleet_map import mean_activity
from dashboard.queries.busy import busy_by_team, busy_by_workload
from dashboard.queries.gpus import holders_over_range
from dashboard.queries.my_teams import idle_workloads
from dashboard.queries.overview import fleet_now, pending_while_free
from fleet.models import Gpu, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from quotas.choices import WorkloadState
from quotas.models import ClusterQueue, ClusterQueueQuota, Team, Workload
from tests.ledger.rollup_scenario import usage_row

H = datetime(2026, 5, 4, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _workload_hour(workload: Workload, hour: datetime, allocated: float, idle: float) -> None:
    HourlyRollup.objects.create(
        cluster=workload.cluster,
        scope=RollupScope.WORKLOAD,
        key=f"{workload.namespace}/{workload.name}",
        hour=hour,
        flavor="h100",
        team=workload.cluster_queue.team,
        cluster_queue=workload.cluster_queue,
        workload=workload,
        allocated_gpu_hours=allocated,
        telemetry_gpu_hours=allocated,
        idle_gpu_hours=idle,
        windows=60,
    )


@pytest.mark.django_db
def test_my_teams_idle_list_follows_the_idle_workload_share_setting(cluster):
    team = Team.objects.create(name="red")
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq-red", team=team)
    workload = Workload.objects.create(
        cluster=cluster,
        namespace="red",
        name="notebook",
        cluster_queue=queue,
        state=WorkloadState.ADMITTED,
        requested_gpus=2,
        admitted_gpus=2,
    )
    # 2 GPU-hours an hour, 0.6 of them idle, twice: idle share 1.2 / 4 = 0.3.
    _workload_hour(workload, H, 2.0, 0.6)
    _workload_hour(workload, H + HOUR, 2.0, 0.6)
    span = HourSpan(H, H + 2 * HOUR)
    with override_settings(GPULEDGER_IDLE_WORKLOAD_SHARE=0.3):
        assert [w.pk for w, _ in idle_workloads(team, span)] == [workload.pk]
    with override_settings(GPULEDGER_IDLE_WORKLOAD_SHARE=0.31):
        assert idle_workloads(team, span) == []


@pytest.mark.django_db
def test_gpus_held_on_a_workload_page_are_held_by_running_pods(staff_client, cluster):
    """A ghost: admitted 4 GPUs of quota, no pod running. "Held" is 0, as on every page."""
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq")
    kwargs = {"cluster": cluster, "namespace": "ns", "cluster_queue": queue}
    ghost = Workload.objects.create(
        name="ghost", state=WorkloadState.ADMITTED, requested_gpus=4, admitted_gpus=4, **kwargs
    )
    running = Workload.objects.create(
        name="run", state=WorkloadState.ADMITTED, requested_gpus=2, admitted_gpus=2, **kwargs
    )
    now = timezone.now().replace(second=0, microsecond=0)
    GpuUsage.objects.bulk_create(
        [
            usage_row(cluster, now, f"g{n}", sm=0.5, workload=running, pod=f"run-{n}")
            for n in range(2)
        ]
    )

    def card(workload: Workload) -> dict:
        response = staff_client.get(reverse("dashboard:workload-detail", args=[workload.pk]))
        return {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]

    assert (card(ghost)["label"], card(ghost)["value"]) == ("GPUs held", "0")
    assert "admitted (quota) 4" in card(ghost)["note"]
    assert card(running)["value"] == "2"


@pytest.mark.django_db
def test_the_workload_list_leaves_out_jobs_that_ended_before_the_range_and_held_nothing(
    staff_client, cluster
):
    now = timezone.now()
    last_hour = now.replace(minute=0, second=0, microsecond=0) - HOUR
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq")
    kwargs = {"cluster": cluster, "namespace": "ns", "cluster_queue": queue}
    old = now - timedelta(days=3)
    long_gone = Workload.objects.create(
        name="long-gone", state=WorkloadState.SUCCEEDED, finished_at=old, **kwargs
    )
    ran_in_range = Workload.objects.create(
        name="ran-in-range", state=WorkloadState.SUCCEEDED, finished_at=old, **kwargs
    )
    _workload_hour(ran_in_range, last_hour, 2.0, 0.0)  # its GPU-hours were stored late
    ended_in_range = Workload.objects.create(
        name="ended-in-range",
        state=WorkloadState.FAILED,
        finished_at=now - timedelta(hours=2),
        **kwargs,
    )
    waiting = Workload.objects.create(name="waiting", requested_gpus=8, **kwargs)

    response = staff_client.get(reverse("dashboard:workload-list"), {"range": "24h"})

    listed = {row["workload"].name for row in response.context["rows"]}
    assert listed == {ran_in_range.name, ended_in_range.name, waiting.name}
    assert long_gone.name not in listed


@pytest.mark.django_db
def test_pending_gpus_on_the_overview_go_to_the_flavor_the_workload_waits_for(cluster):
    """A queue quotas h100 first, then a100; its workload waiting for a100 (Kueue's message says
    so) is a100 demand, not h100."""
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq")
    for position, flavor in enumerate(("h100", "a100")):
        ClusterQueueQuota.objects.create(
            cluster_queue=queue,
            flavor_name=flavor,
            resource="nvidia.com/gpu",
            position=position,
            nominal=Decimal(8),
        )
    kwargs = {"cluster": cluster, "namespace": "ns", "cluster_queue": queue}
    Workload.objects.create(
        name="wants-a100",
        requested_gpus=64,
        state_message="couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 56 more needed",
        **kwargs,
    )
    Workload.objects.create(name="says-nothing", requested_gpus=8, **kwargs)

    now = fleet_now({})
    waits = {wait.flavor: wait.pending for wait in pending_while_free(now)}

    assert now.pending_gpus == 72
    assert waits == {"a100": 64, "h100": 8}


@pytest.mark.django_db
def test_mean_gpu_util_of_a_busy_workload_is_over_the_range_as_its_team_s(cluster):
    """One workload, the team's only one: 1 GPU-hour at GPU_UTIL 90 % busy-not-working, then 1 at
    50 % working. GPU-hour weighted over the range, the team and the workload say (0.9 + 0.5) / 2
    = 70 %; the workload row used to average its busy hours only (90 %)."""
    team = Team.objects.create(name="serving")
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq-serving", team=team)
    workload = Workload.objects.create(
        cluster=cluster, namespace="serving", name="vllm", cluster_queue=queue, admitted_gpus=1
    )
    for hour, util, busy in ((H, 0.9, 1.0), (H + HOUR, 0.5, 0.0)):
        common = {
            "cluster": cluster,
            "hour": hour,
            "flavor": "h100",
            "team": team,
            "allocated_gpu_hours": 1.0,
            "telemetry_gpu_hours": 1.0,
            "active_gpu_hours": 0.1 if busy else 0.6,
            "gpu_util_gpu_hours": util,
            "gpu_util_covered_gpu_hours": 1.0,
            "busy_not_working_gpu_hours": busy,
            "windows": 60,
        }
        HourlyRollup.objects.create(scope=RollupScope.TEAM, key=team.name, **common)
        HourlyRollup.objects.create(
            scope=RollupScope.WORKLOAD,
            key="serving/vllm",
            workload=workload,
            cluster_queue=queue,
            **common,
        )
    span = HourSpan(H, H + 2 * HOUR)

    [team_row] = busy_by_team(span, None)
    [workload_row], _hidden = busy_by_workload(span, None)

    assert team_row.figures.mean_gpu_util == pytest.approx(0.7)
    assert workload_row.figures.mean_gpu_util == pytest.approx(0.7)
    assert workload_row.figures.busy_not_working_gpu_hours == pytest.approx(1.0)


@pytest.mark.django_db
def test_gpu_and_node_pages_leave_out_the_hour_in_progress(cluster, time_machine):
    """At 12:20, "last 24 hours" counts the hours that ended: a GPU held for 2 windows of 11:xx
    and 2 windows of the hour in progress shows 2 windows' GPU-hours on its page, as the
    rollups of those hours would."""
    now = datetime(2026, 5, 4, 12, 20, tzinfo=UTC)
    time_machine.move_to(now, tick=False)
    node = Node.objects.create(cluster=cluster, name="n1", flavor="h100", gpu_capacity=1)
    gpu = Gpu.objects.create(
        cluster=cluster, node=node, host="n1", uuid="GPU-1", index=0, model_name="H100"
    )
    ends = [
        datetime(2026, 5, 4, 11, 30, tzinfo=UTC),
        datetime(2026, 5, 4, 12, 0, tzinfo=UTC),  # the last window of hour 11:00
        datetime(2026, 5, 4, 12, 5, tzinfo=UTC),  # hour 12:00, still in progress
        datetime(2026, 5, 4, 12, 10, tzinfo=UTC),
    ]
    GpuUsage.objects.bulk_create(
        [
            usage_row(
                cluster, end, gpu.key, gpu=gpu, node_name="n1", sm=0.5, pod="p", namespace="a"
            )
            for end in ends
        ]
    )
    time_range = TimeRange(now - timedelta(hours=24), now, "24h")

    [row] = holders_over_range([gpu.pk], time_range, None)

    assert row["gpu_hours"] == pytest.approx(2 / 60)  # two one-minute windows, by hand
    assert row["until"] == ends[1]
    assert mean_activity([gpu.pk], time_range) == {gpu.pk: pytest.approx(0.5)}


@pytest.mark.django_db
def test_my_teams_says_how_much_of_the_quota_was_used_over_the_range_per_flavor(
    lead_client, lead_user, cluster, time_machine
):
    """Two ended hours: h100 held 3 of 4 nominal GPU-hours each (6 / 8 = 75 %), a100 held 1
    with no quota of its own (borrowed: no ratio). The hour in progress counts nowhere."""
    now = datetime(2026, 5, 4, 12, 20, tzinfo=UTC)
    time_machine.move_to(now, tick=False)
    team = Team.objects.create(name="red")
    team.leads.add(lead_user)
    hours = [datetime(2026, 5, 4, h, tzinfo=UTC) for h in (10, 11, 12)]  # 12:00 in progress
    for hour in hours:
        for flavor, allocated, nominal in (("h100", 3.0, 4.0), ("a100", 1.0, 0.0)):
            HourlyRollup.objects.create(
                cluster=cluster,
                scope=RollupScope.TEAM,
                key=team.name,
                hour=hour,
                flavor=flavor,
                team=team,
                allocated_gpu_hours=allocated,
                nominal_gpu_hours=nominal,
                windows=60,
            )

    response = lead_client.get(
        reverse("dashboard:my-teams"), {"start": "2026-05-04T10:00", "end": "2026-05-04T12:20"}
    )

    [card] = response.context["cards"]
    used = {row["flavor"]: row for row in card["quota_used"]}
    assert (used["h100"]["allocated"], used["h100"]["nominal"], used["h100"]["used"]) == (
        "6",
        "8",
        "75.0",
    )
    assert (used["a100"]["allocated"], used["a100"]["used"]) == ("2", "—")
    assert 'data-testid="quota-used"' in response.content.decode()

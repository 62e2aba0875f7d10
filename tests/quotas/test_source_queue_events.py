"""A Volcano or KAI queue WATCH event re-translates only the queues it touches
(``quotas.sources._touched``): the queue, its parent Cohort, and the queues whose PodGroups
changed since their last translation; the events it yields are those a translation of every
queue would give."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from fleet.models import Cluster
from quotas.kueue import ResourceExpired
from quotas.sources import SourceClient, kai, volcano
from tests.quotas.source_helpers import resource
from tests.scheduler_fixtures import (
    KAI_GROUP,
    VOLCANO_GROUP,
    load_scheduler_fixtures,
    scheduler_items,
)

GPU = "nvidia.com/gpu"
QUEUE = f"Queue.{VOLCANO_GROUP}"
POD_GROUP = f"PodGroup.{VOLCANO_GROUP}"


@pytest.fixture
def volcano_api(make_kube_api) -> Any:
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    return load_scheduler_fixtures(api, "volcano")


@pytest.fixture
def cluster(db: None) -> Cluster:
    return Cluster.objects.create(name="gpu-volcano")


def _in_use(cluster_queue: dict[str, Any]) -> str:
    (flavor,) = cluster_queue["status"]["flavorsUsage"]
    return next(r["total"] for r in flavor["resources"] if r["name"] == GPU)


@pytest.mark.parametrize(
    ("module", "source"),
    [(volcano, "volcano"), (kai, "kai")],
)
def test_translating_some_queues_gives_what_translating_all_gives_them(module, source) -> None:
    listed = scheduler_items(source, f"Queue.{VOLCANO_GROUP if source == 'volcano' else KAI_GROUP}")
    names = sorted(q["metadata"]["name"] for q in listed)
    summary: dict[str, Any] = {}
    for kind in ("Cohort", "ClusterQueue"):
        every = module.queues_as(kind, listed, summary)
        for name in names:
            some = module.queues_as(kind, listed, summary, {name})
            assert some == ({name: every[name]} if name in every else {}), (kind, name)


def test_a_queue_event_also_brings_the_queues_whose_pod_groups_changed(
    volcano_api, cluster
) -> None:
    """ddp-smoke (team-v2, Inqueue, 2 GPUs reserved) starts Running; before Volcano updates
    team-v2's status, team-v1's weight changes. The team-v1 event re-translates team-v2 too:
    its quota in use is its 8 allocated GPUs with nothing reserved (README: 8 + 2 before)."""
    ddp = next(
        g["metadata"]["name"]
        for g in scheduler_items("volcano", POD_GROUP)
        if g["metadata"]["name"].startswith("ddp-smoke")
    )

    def running(group: dict[str, Any]) -> None:
        group["status"] = {**group["status"], "phase": "Running", "running": 2}

    def heavier(queue: dict[str, Any]) -> None:
        queue["spec"]["weight"] = 3

    with SourceClient.for_cluster(cluster) as client:
        queues_listed = client.list_objects("ClusterQueue")
        groups_listed = client.list_objects("Workload")
        before = {q["metadata"]["name"]: q for q in queues_listed.items}
        volcano_api.modify(POD_GROUP, ddp, running, namespace="team-v2")
        volcano_api.modify(QUEUE, "team-v1", heavier)
        list(client.watch("Workload", groups_listed.resource_version, 1))
        events = list(client.watch("ClusterQueue", queues_listed.resource_version, 1))

    assert _in_use(before["team-v2"]) == "10"
    changed = {e.object["metadata"]["name"]: e.object for e in events if e.type == "MODIFIED"}
    assert sorted(changed) == ["team-v1", "team-v2"]
    assert changed["team-v1"]["spec"]["fairSharing"] == {"weight": "3"}
    assert _in_use(changed["team-v2"]) == "8"


def _many_queues(leaves: int) -> list[dict[str, Any]]:
    """root, research as in the fixtures, and ``leaves`` copies of team-v3 under research
    (deserved 8 each)."""
    fixture = {q["metadata"]["name"]: q for q in scheduler_items("volcano", QUEUE)}
    listed = [fixture["root"], fixture["research"]]
    for n in range(leaves):
        leaf = copy.deepcopy(fixture["team-v3"])
        leaf["metadata"].update(name=f"leaf-{n:03d}", uid=f"00000000-0000-4000-8000-{n:012d}")
        leaf["metadata"].pop("resourceVersion", None)
        listed.append(leaf)
    return listed


def test_a_queue_event_costs_the_queues_it_touches_not_every_queue(
    make_kube_api, cluster, monkeypatch
) -> None:
    """300 leaves under research: one leaf's deserved goes 8 -> 4. Each of the two queue
    watches translates that leaf and research, before and after, and nothing else; research's
    own quota is then 40 - (299 x 8 + 4) clamped at 0, so only its version changes."""
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    api.load(QUEUE, _many_queues(300))
    api.load(POD_GROUP, [])
    translated: list[str] = []
    to_cq, to_cohort = volcano.queue_to_cluster_queue, volcano.queue_to_cohort

    def count_cq(queue: dict[str, Any], reserved: Decimal = Decimal(0)) -> dict[str, Any]:
        translated.append(queue["metadata"]["name"])
        return to_cq(queue, reserved)

    def count_cohort(queue: dict[str, Any], children: list[Any]) -> dict[str, Any]:
        translated.append(queue["metadata"]["name"])
        return to_cohort(queue, children)

    def smaller(queue: dict[str, Any]) -> None:
        queue["spec"]["deserved"][GPU] = "4"

    with SourceClient.for_cluster(cluster) as client:
        cluster_queues = client.list_objects("ClusterQueue")
        cohorts = client.list_objects("Cohort")
        api.modify(QUEUE, "leaf-007", smaller)
        monkeypatch.setattr(volcano, "queue_to_cluster_queue", count_cq)
        monkeypatch.setattr(volcano, "queue_to_cohort", count_cohort)
        cq_events = list(client.watch("ClusterQueue", cluster_queues.resource_version, 1))
        cohort_events = list(client.watch("Cohort", cohorts.resource_version, 1))

    assert sorted(translated) == ["leaf-007"] * 4 + ["research"] * 4
    (leaf,) = [e.object for e in cq_events if e.type == "MODIFIED"]
    assert (leaf["metadata"]["name"], resource(leaf)["nominalQuota"]) == ("leaf-007", "4")
    (parent,) = [e.object for e in cohort_events if e.type == "MODIFIED"]
    assert parent["metadata"]["name"] == "research"
    assert resource(parent)["nominalQuota"] == "0"
    assert parent["metadata"]["resourceVersion"] == leaf["metadata"]["resourceVersion"]


def test_a_queue_moved_under_a_leaf_still_ends_the_watch_for_a_relist(volcano_api, cluster) -> None:
    """team-v3 moves from research to team-v2: team-v2 becomes a parent (a Cohort), which only
    a relist can show, so the ClusterQueue WATCH ends with ResourceExpired."""

    def under_team_v2(queue: dict[str, Any]) -> None:
        queue["spec"]["parent"] = "team-v2"

    with SourceClient.for_cluster(cluster) as client:
        listed = client.list_objects("ClusterQueue")
        volcano_api.modify(QUEUE, "team-v3", under_team_v2)
        with pytest.raises(ResourceExpired, match="team-v3 changes which queues are parents"):
            list(client.watch("ClusterQueue", listed.resource_version, 1))


def test_a_kai_queue_event_brings_the_counts_of_a_queue_whose_pod_group_was_allocated(
    make_kube_api, cluster
) -> None:
    """KAI fixtures: kai-team-b has vit-sweep allocated and protein-fold pending (1 pending,
    1 admitted). protein-fold gets its 16 GPUs allocated, then kai-team-a's weight changes: the
    kai-team-a event re-summarizes kai-team-b's PodGroups too, 0 pending and 2 admitted."""
    api = make_kube_api(load=False, kueue_versions=(), kai_versions=("v2", "v2alpha2"))
    load_scheduler_fixtures(api, "kai")
    queue_kind, group_kind = f"Queue.{KAI_GROUP}", f"PodGroup.{KAI_GROUP}"
    protein = next(
        g["metadata"]["name"]
        for g in scheduler_items("kai", group_kind)
        if g["metadata"]["name"].startswith("pg-protein-fold")
    )

    def allocated(group: dict[str, Any]) -> None:
        status = group["status"]["resourcesStatus"]
        status["allocated"] = dict(status["requested"])

    def heavier(queue: dict[str, Any]) -> None:
        queue["spec"]["resources"]["gpu"]["overQuotaWeight"] = 3

    with SourceClient.for_cluster(cluster) as client:
        queues_listed = client.list_objects("ClusterQueue")
        groups_listed = client.list_objects("Workload")
        before = {q["metadata"]["name"]: q for q in queues_listed.items}
        api.modify(group_kind, protein, allocated, namespace="kai-team-b")
        api.modify(queue_kind, "kai-team-a", heavier)
        list(client.watch("Workload", groups_listed.resource_version, 1))
        events = list(client.watch("ClusterQueue", queues_listed.resource_version, 1))

    counts = ("pendingWorkloads", "admittedWorkloads")
    assert tuple(before["kai-team-b"]["status"][c] for c in counts) == (1, 1)
    changed = {e.object["metadata"]["name"]: e.object for e in events if e.type == "MODIFIED"}
    assert sorted(changed) == ["kai-team-a", "kai-team-b"]
    assert tuple(changed["kai-team-b"]["status"][c] for c in counts) == (0, 2)

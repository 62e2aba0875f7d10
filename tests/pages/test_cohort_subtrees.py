"""A cohort's figures on the cohort list and cohort page cover its whole subtree
(docs/architecture.md "Cohort subtrees"): the recorded Volcano fleet (root over research over the
team queues) and the recorded Kueue fleet with its two cohorts put under a parent cohort, each
synced through the real client and the loopback API server. Expected figures are the fixture
READMEs'."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.urls import reverse

from dashboard.templatetags.formatting import figure as fmt
from fleet.models import Cluster
from quotas.sync import sync_cluster
from tests.scheduler_fixtures import load_scheduler_fixtures


def _rows(client: Any) -> dict[str, dict[str, Any]]:
    response = client.get(reverse("dashboard:cohort-list"))
    assert response.status_code == 200
    return {row["cohort"].name: row for row in response.context["rows"]}


def _page(client: Any, cluster: str, name: str) -> Any:
    response = client.get(reverse("dashboard:cohort-detail", args=[cluster, name]))
    assert response.status_code == 200
    return response


def _stats(response: Any) -> dict[str, dict[str, Any]]:
    return {card["label"]: card for card in response.context["stats"]}


@pytest.fixture
def volcano(make_kube_api, db) -> Cluster:
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    load_scheduler_fixtures(api, "volcano")
    cluster = Cluster.objects.create(name="gpu-volcano")
    sync_cluster(cluster.pk)
    return cluster


def test_a_volcano_root_cohort_shows_its_whole_tree(staff_client, volcano) -> None:
    """README: root deserves 96 (its own 24 + research 40 + prod 32 + default 0) and has 50
    in use (allocated 48 + ddp-smoke's 2 reserved); research 40 and 34; 5 ClusterQueues under
    root (default, prod, team-v1..3), 3 under research."""
    rows = _rows(staff_client)

    assert (rows["root"]["nominal"], rows["root"]["usage"]) == (fmt(96.0), fmt(50.0))
    assert rows["root"]["cohort"].members == 5
    assert rows["root"]["pool"] == fmt(24.0)
    assert (rows["research"]["nominal"], rows["research"]["usage"]) == (fmt(40.0), fmt(34.0))
    assert rows["research"]["cohort"].members == 3
    # team-v1 borrows 8 of research's members' quota; nobody else borrows.
    assert (rows["root"]["borrowed"], rows["research"]["borrowed"]) == (fmt(8.0), fmt(8.0))

    page = _page(staff_client, "gpu-volcano", "root")
    members = [row["queue"].name for row in page.context["member_rows"]]
    assert members == ["default", "prod", "team-v1", "team-v2", "team-v3"]
    stats = _stats(page)
    assert stats["Nominal quota"]["value"] == fmt(96.0)
    assert stats["Admitted now (quota)"]["value"] == fmt(50.0)
    # Pending: protein-fold's 16 GPUs (team-v2), the only Pending PodGroup.
    assert stats["Pending demand"]["value"] == fmt(16.0)


@pytest.fixture
def kueue_nested(make_kube_api, db) -> Cluster:
    """The recorded Kueue fleet with a Cohort ``org`` (no quota of its own) as the parent of
    research and prod."""
    api = make_kube_api()
    prod = api.get("Cohort", "prod")
    org = copy.deepcopy(prod)
    org["metadata"] = {"name": "org", "uid": "0f0f0f0f-0000-4000-8000-00000000000a"}
    org["spec"] = {}
    org.pop("status", None)
    api.add("Cohort", org)
    for name in ("research", "prod"):

        def under_org(cohort: dict[str, Any]) -> None:
            cohort["spec"]["parentName"] = "org"

        api.modify("Cohort", name, under_org)
    cluster = Cluster.objects.create(name="gpu-east")
    sync_cluster(cluster.pk)
    return cluster


def test_a_kueue_parent_cohort_shows_its_child_cohorts_members(staff_client, kueue_nested) -> None:
    """README: research's nominal is H100 32 + A100 24 (its pool's 8 included) = 56 with 31
    admitted (team-a 20, team-b 2, team-c 9); prod's 32 + 8 = 40 with 38 admitted (serving 18,
    batch 20). org adds both: 96 and 69, 5 members; it borrows 8 (team-a 4, batch 4) and lends
    8 (each cohort's members lend what its borrowers take beyond its own H100 quota, none)."""
    rows = _rows(staff_client)

    assert (rows["org"]["nominal"], rows["org"]["usage"]) == (fmt(96.0), fmt(69.0))
    assert rows["org"]["cohort"].members == 5
    assert (rows["org"]["borrowed"], rows["org"]["lent"]) == (fmt(8.0), fmt(8.0))
    assert (rows["research"]["nominal"], rows["research"]["usage"]) == (fmt(56.0), fmt(31.0))
    assert (rows["prod"]["nominal"], rows["prod"]["usage"]) == (fmt(40.0), fmt(38.0))

    page = _page(staff_client, "gpu-east", "org")
    members = [row["queue"].name for row in page.context["member_rows"]]
    assert members == ["batch", "serving", "team-a", "team-b", "team-c"]
    stats = _stats(page)
    assert stats["Nominal quota"]["value"] == fmt(96.0)
    assert stats["Members"]["unit"] == "ClusterQueues in 3 cohorts"
    # Pending: A3 8 + A5 4 + B2 4 + P2 8 (README: pending GPU demand).
    assert stats["Pending demand"]["value"] == fmt(24.0)
    # A child cohort's card names its parent as Kueue does, in lower case.
    assert _stats(_page(staff_client, "gpu-east", "research"))["Members"]["note"] == (
        "parent cohort org"
    )

"""Quota write-back to Volcano and KAI queues, against the loopback Kubernetes API server serving
the recorded Volcano (tests/fixtures/volcano) and KAI (tests/fixtures/kai) fleets, through the
real client and the sync.

Every expected request and value is worked out by hand from the fixture READMEs' queue tables
and the mapping of docs/architecture.md "Quota write-back" (Volcano: nominal -> deserved,
nominal + borrowing limit -> capability, nominal - lending limit -> guarantee; KAI: nominal ->
gpu.quota, nominal + borrowing limit -> gpu.limit, -1 = no limit), never from the code.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Permission
from django.core import mail

from fleet.models import Cluster
from quotas.choices import QuotaChangeStatus
from quotas.models import ClusterQueue, Cohort
from quotas.sync import sync_cluster
from quotas.writeback import service
from quotas.writeback.edits import EditError
from quotas.writeback.gitops import gitops_owner
from quotas.writeback.native import VOLCANO_FIELDS
from tests.scheduler_fixtures import KAI_GROUP, VOLCANO_GROUP, load_scheduler_fixtures

GPU = "nvidia.com/gpu"
FLAVOR = "default-flavor"
VOLCANO_QUEUE = f"Queue.{VOLCANO_GROUP}"
KAI_QUEUE = f"Queue.{KAI_GROUP}"
MERGE = "application/merge-patch+json"
CELL = f"{FLAVOR}/{GPU}"


def cell(nominal: str, borrowing: str | None, lending: str | None) -> dict[str, Any]:
    return {
        "flavor": FLAVOR,
        "resource": GPU,
        "nominal": nominal,
        "borrowing_limit": borrowing,
        "lending_limit": lending,
    }


@pytest.fixture
def admin_user(db: None, django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user(
        username="quota-admin", is_staff=True, email="admin@example.com"
    )
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return django_user_model.objects.get(pk=user.pk)


@pytest.fixture
def volcano_api(make_kube_api: Any) -> Any:
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    load_scheduler_fixtures(api, "volcano")

    # team-v1 also holds CPU and memory in each of its maps: a GPU edit must keep them.
    def more_resources(obj: dict[str, Any]) -> None:
        spec = obj["spec"]
        spec["deserved"].update({"cpu": "64", "memory": "512Gi"})
        spec["capability"].update({"cpu": "128"})
        spec["guarantee"]["resource"].update({"cpu": "32"})

    api.modify(VOLCANO_QUEUE, "team-v1", more_resources)
    return api


@pytest.fixture
def kai_api(make_kube_api: Any) -> Any:
    api = make_kube_api(load=False, kueue_versions=(), kai_versions=("v2", "v2alpha2"))
    return load_scheduler_fixtures(api, "kai")


def _synced(name: str) -> Cluster:
    cluster = Cluster.objects.create(name=name, quota_write_enabled=True)
    run = sync_cluster(cluster.pk)
    assert run.status == "success", run.error
    return cluster


@pytest.fixture
def volcano(volcano_api: Any, db: None) -> Cluster:
    return _synced("gpu-volcano")


@pytest.fixture
def kai(kai_api: Any, db: None) -> Cluster:
    return _synced("gpu-kai")


def _gpu_quota(name: str) -> tuple[Decimal, Decimal | None, Decimal | None]:
    quota = ClusterQueue.objects.get(name=name).quotas.get(resource=GPU)
    return quota.nominal, quota.borrowing_limit, quota.lending_limit


def _preview(queue: str, *changes: dict[str, Any], user: Any, **kwargs: Any) -> Any:
    return service.preview(
        cluster_queue=ClusterQueue.objects.get(name=queue),
        changes=list(changes),
        stop_policy=kwargs.pop("stop_policy", None),
        reason=kwargs.pop("reason", "rebalance the research queues"),
        user=user,
        **kwargs,
    )


# --- Volcano ---------------------------------------------------------------------------------


def test_a_volcano_queue_is_dry_run_then_patched_on_its_gpu_keys_only(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    live = volcano_api.get(VOLCANO_QUEUE, "team-v1")
    rv = live["metadata"]["resourceVersion"]
    # team-v1: deserved 16, capability 32, guarantee 8 -> nominal 16, borrowing 16, lending 8.
    # The nominal goes to 20; the limits are not named: borrowing stays 16 (capability
    # 20 + 16 = 36) and the lending limit is not edited, so the guarantee (never lent) stays 8
    # and the lending limit is 20 - 8 = 12.
    change = _preview(
        "team-v1", {"flavor": FLAVOR, "resource": GPU, "nominal": "20"}, user=admin_user
    )

    assert change.status == QuotaChangeStatus.PREVIEWED
    assert change.dry_run == {"ok": True}
    assert change.before == [cell("16", "16", "8")]
    assert change.after == [cell("20", "16", "12")]
    assert change.resource_version == rv
    assert change.target_resource == "queues.scheduling.volcano.sh"
    assert change.target_api_version == "scheduling.volcano.sh/v1beta1"
    spec = {"deserved": {GPU: "20"}, "capability": {GPU: "36"}}
    (dry,) = volcano_api.writes("queues")
    assert dry.path == "/apis/scheduling.volcano.sh/v1beta1/queues/team-v1"
    assert dry.query == {"fieldManager": "gpu-ledger", "dryRun": "All"}
    assert dry.headers["Content-Type"].startswith(MERGE)
    assert dry.json == {"spec": spec, "metadata": {"resourceVersion": rv}}
    # The dry run stored nothing.
    assert volcano_api.get(VOLCANO_QUEUE, "team-v1") == live
    assert yaml.safe_load(change.preview["yaml"]) == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "team-v1"},
        "spec": spec,
    }
    assert change.preview["kubectl"].startswith(
        "kubectl patch queues.scheduling.volcano.sh team-v1 --type=merge "
        "--field-manager=gpu-ledger -p "
    )

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    sent = volcano_api.writes("queues")[1]
    assert sent.path == "/apis/scheduling.volcano.sh/v1beta1/queues/team-v1"
    assert sent.query == {"fieldManager": "gpu-ledger"}
    assert sent.json == {"spec": spec, "metadata": {"resourceVersion": rv}}
    written = volcano_api.get(VOLCANO_QUEUE, "team-v1")["spec"]
    # A merge patch of a map changes the keys it names: CPU and memory stay.
    assert written["deserved"] == {GPU: "20", "cpu": "64", "memory": "512Gi"}
    assert written["capability"] == {GPU: "36", "cpu": "128"}
    assert written["guarantee"] == {"resource": {GPU: "8", "cpu": "32"}}
    assert (written["weight"], written["reclaimable"], written["parent"]) == (2, True, "research")

    # The next sync shows the new quota and marks the change applied and observed.
    sync_cluster(volcano.pk)
    assert _gpu_quota("team-v1") == (Decimal(20), Decimal(16), Decimal(12))
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED


def test_an_edited_volcano_lending_limit_writes_the_guarantee(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    # team-v1 lending 8 -> 4 at nominal 16: guarantee 16 - 4 = 12; the CPU guarantee stays.
    change = _preview("team-v1", cell("16", "16", "4"), user=admin_user)
    assert change.after == [cell("16", "16", "4")]
    service.apply(change, admin_user)
    assert volcano_api.writes("queues")[-1].json["spec"] == {"guarantee": {"resource": {GPU: "12"}}}
    assert volcano_api.get(VOLCANO_QUEUE, "team-v1")["spec"]["guarantee"] == {
        "resource": {GPU: "12", "cpu": "32"}
    }
    sync_cluster(volcano.pk)
    assert _gpu_quota("team-v1") == (Decimal(16), Decimal(16), Decimal(4))


def test_an_unreadable_volcano_queue_still_gets_its_patch_from_the_sync(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    volcano_api.fail("/queues/team-v1", 403, method="GET", message="forbidden")
    change = _preview(
        "team-v1", {"flavor": FLAVOR, "resource": GPU, "nominal": "20"}, user=admin_user
    )

    assert change.preview["patch_from"] == "synced"
    assert "skipped" in change.dry_run
    # As synced: nominal 16, borrowing 16, lending 8 (guarantee 8). Nominal 20, borrowing kept:
    # capability 36; the lending limit not edited: the guarantee stays out of the patch.
    assert yaml.safe_load(change.preview["yaml"])["spec"] == {
        "deserved": {GPU: "20"},
        "capability": {GPU: "36"},
    }
    assert volcano_api.writes("queues") == []


def test_unsetting_volcano_limits_removes_capability_and_guarantee_keys(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    rv = volcano_api.get(VOLCANO_QUEUE, "team-v2")["metadata"]["resourceVersion"]
    # team-v2: deserved 16, capability 24, no guarantee -> borrowing 8, lending 16.
    # No borrowing limit: capability's GPU key removed (null); lending 4: guarantee 16 - 4 = 12.
    change = _preview("team-v2", cell("16", None, "4"), user=admin_user)
    assert change.after == [cell("16", None, "4")]

    service.apply(change, admin_user)

    sent = volcano_api.writes("queues")[-1]
    assert sent.json == {
        "spec": {"capability": {GPU: None}, "guarantee": {"resource": {GPU: "12"}}},
        "metadata": {"resourceVersion": rv},
    }
    written = volcano_api.get(VOLCANO_QUEUE, "team-v2")["spec"]
    assert written["capability"] == {}
    assert written["deserved"] == {GPU: "16"}
    sync_cluster(volcano.pk)
    assert _gpu_quota("team-v2") == (Decimal(16), None, Decimal(4))


def test_a_volcano_change_between_preview_and_apply_is_a_conflict_never_forced(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    change = _preview("team-v3", cell("12", "0", "12"), user=admin_user)

    def someone_else(obj: dict[str, Any]) -> None:
        obj["spec"]["deserved"][GPU] = "10"

    volcano_api.modify(VOLCANO_QUEUE, "team-v3", someone_else)
    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.CONFLICT
    assert change.api_status == 409
    # The live values shown: deserved 10, capability 8 -> borrowing max(0, 8 - 10) = 0;
    # no guarantee -> lending 10.
    assert change.api_answer["live"]["cells"] == [cell("10", "0", "10")]
    assert volcano_api.get(VOLCANO_QUEUE, "team-v3")["spec"]["deserved"] == {GPU: "10"}
    # The dry run and the refused write; nothing else.
    assert [w.query.get("dryRun") for w in volcano_api.writes("queues")] == ["All", None]


def test_a_gitops_managed_volcano_queue_is_refused_with_its_patch(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    def argo(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"] = {
            "argocd.argoproj.io/tracking-id": "queues:scheduling.volcano.sh/Queue:/team-v3"
        }

    volcano_api.modify(VOLCANO_QUEUE, "team-v3", argo)
    change = _preview("team-v3", cell("12", "0", "12"), user=admin_user)
    assert change.preview["gitops"]["tool"] == "argocd"
    # team-v3 deserved 8 -> 12, capability 8 -> 12 + 0, guarantee stays 0 (lending 12 of 12).
    assert yaml.safe_load(change.preview["yaml"]) == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "team-v3"},
        "spec": {"deserved": {GPU: "12"}, "capability": {GPU: "12"}},
    }
    assert not service.writable(change)

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.REFUSED
    assert "Argo CD application queues" in change.api_answer["message"]
    assert len(volcano_api.writes("queues")) == 1  # the preview's dry run only


def test_a_field_manager_owning_volcano_quota_fields_counts_as_gitops(volcano_api: Any) -> None:
    live = volcano_api.get(VOLCANO_QUEUE, "team-v1")
    live["metadata"]["managedFields"] = [
        {
            "manager": "helm",
            "operation": "Update",
            "time": "2026-08-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:deserved": {}, "f:weight": {}}},
        }
    ]
    owner = gitops_owner(live, VOLCANO_FIELDS)
    assert owner is not None and owner.name == "helm"
    assert owner.detail == "field manager helm (Update) owns spec.deserved"
    # Kueue's fields are not a Volcano queue's.
    assert gitops_owner(live) is None


def test_volcano_edits_without_meaning_are_refused_before_any_write(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    # prod is reclaimable: false: it lends nothing whatever its guarantee.
    with pytest.raises(EditError) as lending:
        _preview("prod", cell("32", "0", "8"), user=admin_user)
    assert "reclaimable: false" in lending.value.errors[f"{CELL}/lending_limit"][0]
    with pytest.raises(EditError) as stop:
        _preview("team-v1", cell("16", "16", "8"), user=admin_user, stop_policy="Hold")
    assert "vcctl" in stop.value.errors["stop_policy"][0]
    assert volcano_api.writes("queues") == []


def test_a_leads_request_for_a_volcano_queue_is_approved_and_written(
    volcano_api: Any, volcano: Cluster, admin_user: Any, django_user_model: Any
) -> None:
    lead = django_user_model.objects.create_user(username="lead-v", email="lead@example.com")
    change = _preview("team-v2", cell("20", "8", "20"), user=lead, request_only=True)
    assert change.status == QuotaChangeStatus.REQUESTED
    assert change.dry_run == {"ok": True}

    service.decide(change, admin_user, approve=True, comment="for the protein-fold gang")

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    assert [m.to for m in mail.outbox] == [["lead@example.com"]]
    # deserved 16 -> 20, capability 24 -> 20 + 8 = 28; lending 20 of 20: guarantee 0, as now.
    assert volcano_api.writes("queues")[-1].json["spec"] == {
        "deserved": {GPU: "20"},
        "capability": {GPU: "28"},
    }
    sync_cluster(volcano.pk)
    assert _gpu_quota("team-v2") == (Decimal(20), Decimal(8), Decimal(20))


def _own_pool(name: str) -> dict[str, Any]:
    (group,) = Cohort.objects.get(name=name).resource_groups
    (flavor,) = group["flavors"]
    (resource,) = flavor["resources"]
    return resource


def _preview_cohort(name: str, *changes: dict[str, Any], user: Any) -> Any:
    return service.preview(
        cohort=Cohort.objects.get(name=name),
        changes=list(changes),
        stop_policy=None,
        reason="grow the shared pool",
        user=user,
    )


def test_a_volcano_parent_queues_pool_writes_its_deserved_and_moves_its_capability(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    rv = volcano_api.get(VOLCANO_QUEUE, "research")["metadata"]["resourceVersion"]
    # research deserves 40, its children 16 + 16 + 8 = 40: its own pool is 0. A pool of 8
    # is deserved 8 + 40 = 48; its capability 40 moves by as much: 48.
    change = _preview_cohort("research", cell("8", None, None), user=admin_user)
    assert change.before == [cell("0", None, None)]
    assert change.after == [cell("8", None, None)]
    assert change.resource_version == rv
    assert change.target_resource == "queues.scheduling.volcano.sh"
    spec = {"deserved": {GPU: "48"}, "capability": {GPU: "48"}}
    (dry,) = volcano_api.writes("queues")
    assert dry.path == "/apis/scheduling.volcano.sh/v1beta1/queues/research"
    assert dry.query == {"fieldManager": "gpu-ledger", "dryRun": "All"}
    assert dry.json == {"spec": spec, "metadata": {"resourceVersion": rv}}

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    sent = volcano_api.writes("queues")[1]
    assert (sent.query, sent.json) == (
        {"fieldManager": "gpu-ledger"},
        {"spec": spec, "metadata": {"resourceVersion": rv}},
    )
    sync_cluster(volcano.pk)
    assert _own_pool("research") == {"name": GPU, "nominalQuota": "8"}
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED

    # A Volcano parent shows no limits: none are written.
    with pytest.raises(EditError) as limits:
        _preview_cohort("research", cell("8", "4", None), user=admin_user)
    assert "shows no limits" in limits.value.errors[f"{CELL}/borrowing_limit"][0]


def test_a_childs_change_after_the_preview_is_a_conflict_for_its_parent(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    change = _preview_cohort("research", cell("8", None, None), user=admin_user)

    def smaller(obj: dict[str, Any]) -> None:
        obj["spec"]["deserved"][GPU] = "4"

    # The parent's resourceVersion does not move; its pool would now need deserved 8 + 36.
    volcano_api.modify(VOLCANO_QUEUE, "team-v3", smaller)
    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.CONFLICT
    assert "child queue" in change.api_answer["message"]
    # research deserves 40, its children now 16 + 16 + 4 = 36: a pool of 4.
    assert change.api_answer["live"]["cells"] == [cell("4", None, None)]
    assert len(volcano_api.writes("queues")) == 1  # the dry run only
    assert volcano_api.get(VOLCANO_QUEUE, "research")["spec"]["deserved"] == {GPU: "40"}


# --- KAI -------------------------------------------------------------------------------------


def test_a_kai_queue_is_dry_run_then_patched_with_numbers(
    kai_api: Any, kai: Cluster, admin_user: Any
) -> None:
    live = kai_api.get(KAI_QUEUE, "kai-team-a")
    rv = live["metadata"]["resourceVersion"]
    # kai-team-a: quota 16, limit 32 -> nominal 16, borrowing 16, no lending limit.
    # Nominal 20, borrowing kept: limit 20 + 16 = 36.
    change = _preview(
        "kai-team-a", {"flavor": FLAVOR, "resource": GPU, "nominal": "20"}, user=admin_user
    )
    assert change.dry_run == {"ok": True}
    assert change.before == [cell("16", "16", None)]
    assert change.after == [cell("20", "16", None)]
    assert change.target_resource == "queues.scheduling.run.ai"
    assert change.target_api_version == "scheduling.run.ai/v2"
    spec = {"resources": {"gpu": {"quota": 20, "limit": 36}}}
    (dry,) = kai_api.writes("queues")
    assert dry.path == "/apis/scheduling.run.ai/v2/queues/kai-team-a"
    assert dry.query == {"fieldManager": "gpu-ledger", "dryRun": "All"}
    assert dry.json == {"spec": spec, "metadata": {"resourceVersion": rv}}
    # JSON numbers, as the CRD types them (a string would be refused: 422).
    assert isinstance(dry.json["spec"]["resources"]["gpu"]["quota"], int)
    assert yaml.safe_load(change.preview["yaml"])["apiVersion"] == "scheduling.run.ai/v2"
    assert "kubectl patch queues.scheduling.run.ai kai-team-a" in change.preview["kubectl"]

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    sent = kai_api.writes("queues")[1]
    assert sent.query == {"fieldManager": "gpu-ledger"}
    assert sent.json == {"spec": spec, "metadata": {"resourceVersion": rv}}
    resources = kai_api.get(KAI_QUEUE, "kai-team-a")["spec"]["resources"]
    assert resources == {
        "gpu": {"quota": 20, "limit": 36, "overQuotaWeight": 2},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }
    sync_cluster(kai.pk)
    assert _gpu_quota("kai-team-a") == (Decimal(20), Decimal(16), None)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED


def test_no_kai_borrowing_limit_is_limit_minus_one(
    kai_api: Any, kai: Cluster, admin_user: Any
) -> None:
    change = _preview("kai-team-c", cell("8", None, None), user=admin_user)
    service.apply(change, admin_user)
    assert kai_api.writes("queues")[-1].json["spec"] == {"resources": {"gpu": {"limit": -1}}}
    assert kai_api.get(KAI_QUEUE, "kai-team-c")["spec"]["resources"]["gpu"] == {
        "quota": 8,
        "limit": -1,
        "overQuotaWeight": 1,
    }
    sync_cluster(kai.pk)
    assert _gpu_quota("kai-team-c") == (Decimal(8), None, None)


def test_kai_has_no_lending_limit_to_write(kai_api: Any, kai: Cluster, admin_user: Any) -> None:
    with pytest.raises(EditError) as lending:
        _preview("kai-team-b", cell("16", None, "4"), user=admin_user)
    assert "KAI has no lending limit" in lending.value.errors[f"{CELL}/lending_limit"][0]
    assert kai_api.writes("queues") == []


def test_an_unlimited_kai_quota_takes_a_finite_quota_and_refuses_a_limit_alone(
    kai_api: Any, admin_user: Any, db: None
) -> None:
    def unlimited(obj: dict[str, Any]) -> None:
        obj["spec"]["resources"]["gpu"].update({"quota": -1, "limit": -1})

    kai_api.modify(KAI_QUEUE, "kai-team-b", unlimited)
    cluster = _synced("gpu-kai")
    # Unlimited: the nominal is what it holds (8), nothing lent, no borrowing limit.
    assert _gpu_quota("kai-team-b") == (Decimal(8), None, Decimal(0))
    with pytest.raises(EditError) as limit_alone:
        _preview("kai-team-b", cell("8", "4", "0"), user=admin_user)
    assert "unlimited (-1)" in limit_alone.value.errors[f"{CELL}/borrowing_limit"][0]
    with pytest.raises(EditError) as lending:
        _preview("kai-team-b", cell("12", None, "2"), user=admin_user)
    assert f"{CELL}/lending_limit" in lending.value.errors
    assert kai_api.writes("queues") == []

    # A nominal sets a finite quota (the limit stays -1); the lending limit 0 the unlimited
    # quota showed goes with it.
    change = _preview(
        "kai-team-b", {"flavor": FLAVOR, "resource": GPU, "nominal": "12"}, user=admin_user
    )
    assert change.before == [cell("8", None, "0")]
    assert change.after == [cell("12", None, None)]
    service.apply(change, admin_user)
    assert kai_api.writes("queues")[-1].json["spec"] == {"resources": {"gpu": {"quota": 12}}}
    sync_cluster(cluster.pk)
    assert _gpu_quota("kai-team-b") == (Decimal(12), None, None)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED


def test_a_flux_managed_kai_queue_is_refused_with_its_patch(
    kai_api: Any, kai: Cluster, admin_user: Any
) -> None:
    def flux(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"] = {
            "kustomize.toolkit.fluxcd.io/name": "queues",
            "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
        }

    kai_api.modify(KAI_QUEUE, "kai-serving", flux)
    change = _preview("kai-serving", cell("24", "0", None), user=admin_user)
    assert change.preview["gitops"]["tool"] == "flux"
    assert yaml.safe_load(change.preview["yaml"]) == {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "kai-serving"},
        "spec": {"resources": {"gpu": {"quota": 24, "limit": 24}}},
    }
    service.apply(change, admin_user)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.REFUSED
    assert "Flux Kustomization flux-system/queues" in change.api_answer["message"]
    assert len(kai_api.writes("queues")) == 1


def test_a_kai_parent_queues_pool_writes_its_quota_and_limit(
    kai_api: Any, kai: Cluster, admin_user: Any
) -> None:
    rv = kai_api.get(KAI_QUEUE, "dept-research")["metadata"]["resourceVersion"]
    # dept-research: quota 40, limit -1; children 16 + 16 + 8 = 40: a pool of 0, no limit.
    # A pool of 8 and a borrowing limit of 8: quota 8 + 40 = 48, limit 48 + 8 = 56.
    change = _preview_cohort("dept-research", cell("8", "8", None), user=admin_user)
    assert change.before == [cell("0", None, None)]
    assert change.after == [cell("8", "8", None)]
    spec = {"resources": {"gpu": {"quota": 48, "limit": 56}}}
    (dry,) = kai_api.writes("queues")
    assert dry.path == "/apis/scheduling.run.ai/v2/queues/dept-research"
    assert dry.json == {"spec": spec, "metadata": {"resourceVersion": rv}}

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    assert kai_api.writes("queues")[1].json == {"spec": spec, "metadata": {"resourceVersion": rv}}
    sync_cluster(kai.pk)
    assert _own_pool("dept-research") == {
        "name": GPU,
        "nominalQuota": "8",
        "borrowingLimit": "8",
    }
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED

    # A child with an unlimited quota: the pool moves with what the child holds.
    def unlimited(obj: dict[str, Any]) -> None:
        obj["spec"]["resources"]["gpu"]["quota"] = -1

    kai_api.modify(KAI_QUEUE, "kai-team-c", unlimited)
    sync_cluster(kai.pk)
    with pytest.raises(EditError) as refused:
        _preview_cohort("dept-research", cell("4", "8", None), user=admin_user)
    assert "kai-team-c" in refused.value.errors[f"{CELL}/nominal"][0]


def test_the_api_writes_a_kai_queue_and_names_it(
    kai_api: Any, kai: Cluster, admin_user: Any
) -> None:
    from tests.api.conftest import client_for

    api = client_for(admin_user)
    url = "/api/v1/quota-changes/"
    change = {"flavor": FLAVOR, "resource": GPU, "nominal": "12"}
    body = {"cluster": "gpu-kai", "cluster_queue": "kai-team-c", "reason": "shrink"}
    answer = api.post(url, {**body, "changes": [change], "dry_run": False}, format="json")

    assert answer.status_code == 201, answer.json()
    data = answer.json()
    assert data["status"] == QuotaChangeStatus.APPLIED
    assert (data["target_resource"], data["target_api_version"]) == (
        "queues.scheduling.run.ai",
        "scheduling.run.ai/v2",
    )
    # kai-team-c: quota 8, limit 8 (borrowing 0, kept): quota 12, limit 12.
    assert kai_api.writes("queues")[-1].json["spec"] == {
        "resources": {"gpu": {"quota": 12, "limit": 12}}
    }
    lending = api.post(url, {**body, "changes": [{**change, "lending_limit": "2"}]}, format="json")
    assert lending.status_code == 400
    assert f"{CELL}/lending_limit" in lending.json()


def test_a_volcano_change_made_elsewhere_is_recorded_naming_the_queue(
    volcano_api: Any, volcano: Cluster
) -> None:
    from quotas.choices import QuotaChangeSource
    from quotas.models import QuotaChange

    def by_hand(obj: dict[str, Any]) -> None:
        obj["spec"]["deserved"][GPU] = "4"

    volcano_api.modify(VOLCANO_QUEUE, "team-v3", by_hand)
    sync_cluster(volcano.pk)

    observed = QuotaChange.objects.get(source=QuotaChangeSource.OBSERVED, target_name="team-v3")
    assert (observed.target_resource, observed.target_api_version) == (
        "queues.scheduling.volcano.sh",
        "scheduling.volcano.sh/v1beta1",
    )
    # deserved 8 -> 4, capability 8: borrowing 0 -> 4; no guarantee: lending = nominal.
    assert observed.before == [cell("8", "0", "8")]
    assert observed.after == [cell("4", "4", "4")]


def test_a_kai_parent_changed_itself_is_the_api_servers_conflict(
    kai_api: Any, kai: Cluster, admin_user: Any
) -> None:
    # dept-prod: quota 32, limit 32, its child kai-serving 32: a pool of 0, borrowing 0.
    # A pool of 8: quota 40, limit 40 + 0.
    change = _preview_cohort("dept-prod", cell("8", "0", None), user=admin_user)
    assert kai_api.writes("queues")[0].json["spec"] == {
        "resources": {"gpu": {"quota": 40, "limit": 40}}
    }

    def reweighted(obj: dict[str, Any]) -> None:
        obj["spec"]["resources"]["gpu"]["overQuotaWeight"] = 1

    kai_api.modify(KAI_QUEUE, "dept-prod", reweighted)
    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.CONFLICT
    assert change.api_status == 409
    assert [w.query.get("dryRun") for w in kai_api.writes("queues")] == ["All", None]
    assert kai_api.get(KAI_QUEUE, "dept-prod")["spec"]["resources"]["gpu"]["quota"] == 32


def test_a_volcano_dry_run_refusal_comes_back_per_field_and_is_not_applied(
    volcano_api: Any, volcano: Cluster, admin_user: Any
) -> None:
    # An admission rule of the cluster: a child's deserved within its parent's (research, 40).
    def within_parent(resource: Any, obj: dict[str, Any]) -> list[dict[str, str]]:
        deserved = (obj.get("spec") or {}).get("deserved") or {}
        if resource.kind == "Queue" and obj["metadata"]["name"] == "team-v1":
            if int(deserved.get(GPU, "0")) > 40:
                return [
                    {
                        "reason": "FieldValueInvalid",
                        "message": "must not exceed the parent queue's deserved (40)",
                        "field": f"spec.deserved[{GPU}]",
                    }
                ]
        return []

    volcano_api.validators.append(within_parent)
    change = _preview("team-v1", cell("48", "0", "8"), user=admin_user)

    assert change.dry_run["ok"] is False
    assert change.dry_run["status"] == 422
    assert change.dry_run["causes"] == [
        {
            "field": f"spec.deserved[{GPU}]",
            "reason": "FieldValueInvalid",
            "message": "must not exceed the parent queue's deserved (40)",
        }
    ]
    service.apply(change, admin_user)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.FAILED
    assert change.api_status == 422
    assert volcano_api.get(VOLCANO_QUEUE, "team-v1")["spec"]["deserved"][GPU] == "16"


def test_the_test_server_refuses_a_kai_quota_that_is_not_a_number(
    kai_api: Any, kai: Cluster
) -> None:
    from quotas.kueue import KubeError, KueueClient
    from quotas.sources import kai as kai_source

    with KueueClient.for_cluster(kai) as client, pytest.raises(KubeError) as refused:
        client.patch_cluster_object(
            kai_source.QUEUE,
            "v2",
            "kai-team-a",
            {"spec": {"resources": {"gpu": {"quota": "20"}}}},
            field_manager="gpu-ledger",
            dry_run=True,
        )
    assert refused.value.status == 422
    (cause,) = refused.value.status_body["details"]["causes"]
    assert cause["field"] == "spec.resources.gpu.quota"

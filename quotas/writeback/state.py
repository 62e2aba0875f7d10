"""A ClusterQueue's or Cohort's quotas as last synced, and a ClusterQueue's what-if inputs, read
from the latest synced state (one query per kind)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Max, Q

from core.mig import GPU_RESOURCE
from core.quantity import display_quantity, parse_quantity
from quotas.models import ClusterQueue, ClusterQueueQuota, Cohort, ResourceFlavor, Workload
from quotas.now import eviction_pace, latest_samples
from quotas.pending import free_in_quota, pending_reason
from quotas.reclaim import termination_grace_seconds
from quotas.writeback.edits import Cell, live_cells
from quotas.writeback.whatif import Limits, MemberView, WhatIfInputs, WorkloadView


def cohort_cells(cohort: Cohort) -> list[Cell]:
    """A Cohort's own quotas (``spec.resourceGroups``) as last synced."""
    return live_cells({"spec": {"resourceGroups": cohort.resource_groups or []}})


def synced_cells(queue: ClusterQueue) -> list[Cell]:
    """The queue's quotas as last synced, as Kubernetes quantities."""
    return [
        Cell(
            q.flavor_name,
            q.resource,
            display_quantity(q.nominal, q.resource) or "0",
            display_quantity(q.borrowing_limit, q.resource) or None,
            display_quantity(q.lending_limit, q.resource) or None,
        )
        for q in queue.quotas.order_by("resource", "position", "flavor_name")
    ]


def synced_object(queue: ClusterQueue | None) -> dict[str, object] | None:
    """The queue's ``spec.resourceGroups`` rebuilt from its synced quotas, for a patch when the
    live object cannot be read: flavors covering the same resources form one group, in Kueue's
    flavor order. None without a queue or quotas."""
    if queue is None:
        return None
    flavors: dict[str, list[ClusterQueueQuota]] = defaultdict(list)
    positions: dict[str, int] = {}
    for quota in queue.quotas.order_by("position", "flavor_name", "resource"):
        flavors[quota.flavor_name].append(quota)
        positions.setdefault(quota.flavor_name, quota.position)
    if not flavors:
        return None
    groups: dict[tuple[str, ...], list[dict[str, object]]] = {}
    for name in sorted(flavors, key=lambda f: (positions[f], f)):
        quotas = sorted(flavors[name], key=lambda q: q.resource)
        resources = []
        for q in quotas:
            entry: dict[str, object] = {
                "name": q.resource,
                "nominalQuota": display_quantity(q.nominal, q.resource) or "0",
            }
            for crd, value in (
                ("borrowingLimit", q.borrowing_limit),
                ("lendingLimit", q.lending_limit),
            ):
                if value is not None:
                    entry[crd] = display_quantity(value, q.resource)
            resources.append(entry)
        covered = tuple(q.resource for q in quotas)
        groups.setdefault(covered, []).append({"name": name, "resources": resources})
    return {
        "spec": {
            "resourceGroups": [
                {"coveredResources": list(covered), "flavors": members}
                for covered, members in groups.items()
            ]
        }
    }


def limits_of(cells: list[Cell], resource: str = GPU_RESOURCE) -> dict[str, Limits]:
    return {
        cell.flavor: Limits(
            nominal=float(cell.amount("nominal") or 0),
            borrowing_limit=_float(cell.amount("borrowing_limit")),
            lending_limit=_float(cell.amount("lending_limit")),
        )
        for cell in cells
        if cell.resource == resource
    }


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _view(workload: Workload) -> WorkloadView:
    return WorkloadView(
        name=f"{workload.namespace}/{workload.name}",
        priority=workload.priority,
        gpus=float(workload.admitted_gpus or workload.requested_gpus),
        flavor=str((workload.flavors or {}).get(GPU_RESOURCE, "")),
        admitted_at=workload.admitted_at or workload.quota_reserved_at,
        grace_seconds=termination_grace_seconds(workload.pod_sets),
    )


def allowed_flavors(
    pod_sets: object, flavor_labels: dict[str, dict[str, str]]
) -> tuple[str, ...] | None:
    """Flavors whose nodeLabels agree with every pod set's nodeSelector on the keys they share
    (Kueue's flavor assignment); None when no pod set has a selector."""
    selectors = [
        ps["node_selector"]
        for ps in (pod_sets if isinstance(pod_sets, list) else [])
        if isinstance(ps, dict) and isinstance(ps.get("node_selector"), dict)
    ]
    if not selectors:
        return None
    return tuple(
        name
        for name, labels in flavor_labels.items()
        if all(
            labels.get(key, value) == value
            for selector in selectors
            for key, value in selector.items()
        )
    )


def pool_of(resource_groups: object) -> dict[str, float]:
    """A cohort's own GPU quota per flavor; entries that are not quantities are skipped."""
    pool: dict[str, float] = {}
    for group in resource_groups if isinstance(resource_groups, list) else []:
        for flavor in (group.get("flavors") or []) if isinstance(group, dict) else []:
            for quota in flavor.get("resources") or []:
                if not isinstance(quota, dict) or quota.get("name") != GPU_RESOURCE:
                    continue
                try:
                    amount = float(parse_quantity(quota.get("nominalQuota", 0)))
                except ValueError:
                    continue
                name = str(flavor.get("name", ""))
                pool[name] = pool.get(name, 0.0) + amount
    return pool


def whatif_inputs(
    queue: ClusterQueue, before: list[Cell], after: list[Cell], now: datetime
) -> WhatIfInputs:
    """Everything ``whatif.what_if`` reads for ``queue`` with quotas ``before`` -> ``after``."""
    admitted = [
        _view(w)
        for w in Workload.objects.holding().filter(cluster_queue=queue).order_by("admitted_at")
    ]
    pending_rows = (
        Workload.objects.pending()
        .filter(cluster_queue=queue, active=True)
        .order_by("pending_position", "-priority", "observed_at", "name")
    )
    flavor_labels = dict(
        ResourceFlavor.objects.filter(cluster_id=queue.cluster_id).values_list(
            "name", "node_labels"
        )
    )
    found = latest_samples(Q(cluster_queue=queue), now).get(queue.pk)
    # Why each waits now: the words of every page (``quotas.pending``).
    free = free_in_quota(found)
    pending = [
        WorkloadView(
            f"{w.namespace}/{w.name}",
            w.priority,
            float(w.requested_gpus),
            flavors=allowed_flavors(w.pod_sets, flavor_labels),
            reason=pending_reason(w, free),
        )
        for w in pending_rows
    ]
    members: list[MemberView] = []
    pool: dict[str, float] = {}
    pace: dict[str, float | None] = {"admission_seconds": None, "per_hour": None}
    if queue.cohort_id is not None:
        others = list(
            ClusterQueue.objects.present().filter(cohort_id=queue.cohort_id).exclude(pk=queue.pk)
        )
        ids = [other.pk for other in others]
        quotas: dict[int, dict[str, Limits]] = defaultdict(dict)
        for quota in ClusterQueueQuota.objects.filter(
            cluster_queue_id__in=ids, resource=GPU_RESOURCE
        ):
            quotas[quota.cluster_queue_id][quota.flavor_name] = Limits(
                float(quota.nominal),
                _float(quota.borrowing_limit),
                _float(quota.lending_limit),
            )
        used: dict[int, dict[str, float]] = defaultdict(dict)
        borrowing: dict[int, list[WorkloadView]] = defaultdict(list)
        for workload in Workload.objects.holding().filter(cluster_queue_id__in=ids):
            view = _view(workload)
            queue_used = used[workload.cluster_queue_id or 0]
            queue_used[view.flavor] = queue_used.get(view.flavor, 0.0) + view.gpus
            if workload.borrowing:
                borrowing[workload.cluster_queue_id or 0].append(view)
        tops = dict(
            Workload.objects.pending()
            .filter(cluster_queue_id__in=ids, active=True)
            .values_list("cluster_queue_id")
            .annotate(top=Max("priority"))
        )
        members = [
            MemberView(
                name=other.name,
                policy=other.reclaim_within_cohort,
                limits=quotas.get(other.pk, {}),
                used=used.get(other.pk, {}),
                pending_top_priority=tops.get(other.pk),
                borrowers=borrowing.get(other.pk, []),
            )
            for other in others
        ]
        if queue.cohort is not None:
            pool = pool_of(queue.cohort.resource_groups)
        pace = eviction_pace(Q(workload__cluster_queue__cohort_id=queue.cohort_id), now)
    lent = {flavor: values["lent"] for flavor, values in (found.flavors if found else {}).items()}
    order = [cell.flavor for cell in before if cell.resource == GPU_RESOURCE]
    return WhatIfInputs(
        queue=queue.name,
        cohort=queue.cohort_name,
        flavor_order=list(dict.fromkeys(order)),
        before=limits_of(before),
        after=limits_of(after),
        admitted=admitted,
        pending=pending,
        members=members,
        pool=pool,
        lent_now=lent,
        policy=queue.reclaim_within_cohort,
        admission_seconds=pace.get("admission_seconds"),
        evictions_per_hour=pace.get("per_hour"),
    )

"""What the sync records about quota changes: GPU Ledger's own writes become "applied and
observed"; changes made elsewhere (kubectl, GitOps, another tool) become ``observed`` rows with
the field manager from ``managedFields``. A queue seen for the first time records nothing."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from core.quantity import display_quantity
from quotas.choices import QuotaChangeSource, QuotaChangeStatus
from quotas.writeback.edits import Cell, live_cells
from quotas.writeback.models import QuotaChange
from quotas.writeback.native import object_names

if TYPE_CHECKING:
    from quotas.ingest.rows import ClusterQueueRow, CohortRow
    from quotas.store.writer import SnapshotWriter


def _cell(flavor: str, resource: str, values: Mapping[str, Any]) -> Cell:
    return Cell(
        flavor,
        resource,
        display_quantity(values["nominal"], resource) or "0",
        display_quantity(values["borrowing_limit"], resource) or None,
        display_quantity(values["lending_limit"], resource) or None,
    )


def _stop(value: str | None) -> str:
    return value or "None"


def record_observed(
    w: SnapshotWriter,
    queues: Mapping[str, int],
    existing: Mapping[tuple[int, str, str], Mapping[str, Any]],
) -> None:
    """Compare each written queue's quotas and stopPolicy with what was stored before."""
    before: dict[int, dict[tuple[str, str], Cell]] = {}
    for (queue_id, flavor, resource), values in existing.items():
        before.setdefault(queue_id, {})[(flavor, resource)] = _cell(flavor, resource, values)
    waiting: dict[int, list[QuotaChange]] = {}
    ids = [queues[row.meta.name] for row in w.batch.cluster_queues]
    for change in QuotaChange.objects.awaiting_observation().filter(cluster_queue_id__in=ids):
        waiting.setdefault(change.cluster_queue_id or 0, []).append(change)
    new_rows = []
    for row in w.batch.cluster_queues:
        queue_id = queues[row.meta.name]
        old_cells = before.get(queue_id)
        if not old_cells:
            continue
        new_cells = {
            (q.flavor_name, q.resource): _cell(
                q.flavor_name,
                q.resource,
                {
                    "nominal": q.nominal,
                    "borrowing_limit": q.borrowing_limit,
                    "lending_limit": q.lending_limit,
                },
            )
            for q in row.quotas
        }
        changed = [key for key, cell in new_cells.items() if old_cells.get(key) != cell]
        stop_before = _stop(w.stop_policies_before.get(row.meta.name))
        stop_after = _stop(row.stop_policy)
        for change in waiting.get(queue_id, []):
            if change.stop_policy_after and change.stop_policy_after != stop_after:
                continue
            if _cells_match(change, new_cells):
                changed = _mark_observed(change, w.now, changed)
                if change.stop_policy_after:
                    stop_before = stop_after
        if not changed and stop_before == stop_after:
            continue
        new_rows.append(
            _observed(
                w,
                row,
                target_kind="ClusterQueue",
                cluster_queue_id=queue_id,
                before=[old_cells[key].as_dict() for key in changed if key in old_cells]
                + [
                    {**new_cells[key].as_dict(), "nominal": None}
                    for key in changed
                    if key not in old_cells
                ],
                after=[new_cells[key].as_dict() for key in changed],
                stop_policy_before=stop_before if stop_before != stop_after else "",
                stop_policy_after=stop_after if stop_before != stop_after else "",
            )
        )
    _store(w, new_rows)


def _cells_match(change: QuotaChange, cells: Mapping[tuple[str, str], Cell]) -> bool:
    """Whether every cell the change wrote now has the value it wrote."""
    return all(
        (c["flavor"], c["resource"]) in cells and cells[(c["flavor"], c["resource"])].as_dict() == c
        for c in change.after
    )


def _mark_observed(
    change: QuotaChange, now: datetime, changed: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The sync saw what ``change`` wrote: mark it so; the cells it explains are not news."""
    change.status = QuotaChangeStatus.APPLIED_OBSERVED
    change.observed_at = now
    change.save(update_fields=["status", "observed_at", "updated_at"])
    explained = {(c["flavor"], c["resource"]) for c in change.after}
    return [key for key in changed if key not in explained]


def _observed(w: SnapshotWriter, row: ClusterQueueRow | CohortRow, **fields: Any) -> QuotaChange:
    """A change made outside GPU Ledger, as the sync saw it on ``row``'s object (a Volcano or
    KAI queue's named as such)."""
    resource, api_version = object_names(row.scheduler, fields["target_kind"])
    return QuotaChange(
        cluster=w.cluster,
        target_name=row.meta.name,
        target_resource=resource,
        target_api_version=api_version,
        source=QuotaChangeSource.OBSERVED,
        status=QuotaChangeStatus.OBSERVED,
        resource_version=row.meta.resource_version,
        field_manager=row.quota_manager,
        observed_at=w.now,
        **fields,
    )


def _store(w: SnapshotWriter, new_rows: list[QuotaChange]) -> None:
    if new_rows:
        QuotaChange.objects.bulk_create(new_rows)
    w.result.created["QuotaChange"] = w.result.created.get("QuotaChange", 0) + len(new_rows)


def record_observed_cohorts(
    w: SnapshotWriter, ids: Mapping[str, int], pools_before: Mapping[str, Any]
) -> None:
    """The same for explicit Cohorts' own quotas (``spec.resourceGroups``)."""
    rows = [row for row in w.batch.cohorts if not row.implicit and row.meta.name in pools_before]
    waiting: dict[int, list[QuotaChange]] = {}
    for change in QuotaChange.objects.awaiting_observation().filter(
        cohort_id__in=[ids[row.meta.name] for row in rows if row.meta.name in ids]
    ):
        waiting.setdefault(change.cohort_id or 0, []).append(change)
    new_rows = []
    for row in rows:
        old = {
            c.key: c for c in live_cells({"spec": {"resourceGroups": pools_before[row.meta.name]}})
        }
        new = {c.key: c for c in live_cells({"spec": {"resourceGroups": row.resource_groups}})}
        changed = [key for key, cell in new.items() if old.get(key) != cell]
        cohort_id = ids.get(row.meta.name)
        for change in waiting.get(cohort_id or 0, []):
            if change.after and _cells_match(change, new):
                changed = _mark_observed(change, w.now, changed)
        if not changed:
            continue
        new_rows.append(
            _observed(
                w,
                row,
                target_kind="Cohort",
                cohort_id=cohort_id,
                before=[old[key].as_dict() for key in changed if key in old],
                after=[new[key].as_dict() for key in changed],
            )
        )
    _store(w, new_rows)

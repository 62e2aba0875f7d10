"""Quota figures of one scope from the hour's ClusterQueue samples, and the GPU model they go under.

Kueue reports quota per ClusterQueue, so only the scopes of ``groups.quota_groups`` carry quota
figures (``figures`` says which). Every row is split by (flavor, GPU model), but quota samples
name a flavor and no GPU model: they take the flavor's GPU model in that hour's usage rows when
the flavor shows exactly one, else ``ResourceFlavor.gpu_model``, else empty, so a queue's
allocated and nominal figures usually land on the same row.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, FloatField, QuerySet, Sum, Value
from django.db.models.functions import Cast

from core.mig import gpu_share_sql
from ledger.rollup.groups import FOREIGN_KEYS, Group
from quotas.models import ClusterQueueSample, ResourceFlavor


def quota_rows(samples: QuerySet[ClusterQueueSample], group: Group) -> list[dict[str, Any]]:
    """The group's quota GPU-hours and sample windows per (key, flavor) over ``samples``.

    ``samples`` may mix whole GPUs and MIG resources: each counts in GPUs (slices/7 a MIG
    instance), so a flavor's nominal, borrowed and lent GPU-hours add up all of them.
    """
    # Whole GPUs count 1 each and MIG instances slices/7 (``core.mig.gpu_share``).
    hours = Cast(F("window_seconds"), FloatField()) / Value(3600.0) * gpu_share_sql()

    def gpu_hours(field: str) -> Sum:
        return Sum(Cast(F(field), FloatField()) * hours)

    found: list[dict[str, Any]] = [
        dict(row)
        for row in samples.order_by()
        .annotate(key=group.key, flavor=F("flavor_name"))
        .values("key", "flavor")
        .annotate(
            nominal_gpu_hours=gpu_hours("nominal"),
            borrowed_gpu_hours=gpu_hours("borrowed"),
            lent_gpu_hours=gpu_hours("lent"),
            windows=Count("sampled_at", distinct=True),
            **group.fk_maxima(),
        )
    ]
    for row in found:
        for name in FOREIGN_KEYS:
            row[name] = row.pop(f"fk_{name}", None)
    return found


def flavor_models(cluster_id: int, fleet_rows: list[dict[str, Any]]) -> dict[str, str]:
    """The GPU model each flavor's quota samples are filed under (see the module docstring)."""
    models: dict[str, str] = dict(
        ResourceFlavor.objects.filter(cluster_id=cluster_id)
        .exclude(gpu_model="")
        .values_list("name", "gpu_model")
    )
    seen: dict[str, set[str]] = {}
    for row in fleet_rows:
        seen.setdefault(row["flavor"], set()).add(row["gpu_model"])
    for flavor, found in seen.items():
        if len(found) == 1:
            models[flavor] = found.pop()
    return models

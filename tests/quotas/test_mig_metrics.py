"""Kueue's metrics of MIG quota: one sample per queue, flavor and MIG resource, in instances,
lending inferred per resource, and the per-queue figures on the whole-GPU flavor only.

Hand-worked window: cohort ``research`` with ``cq-a`` (4 whole h100, 2 × 3g.40gb in
``a100-mig``, using 3 of them: 1 borrowed) and ``cq-b`` (4 × 3g.40gb, using none); ``cq-m`` is
standalone with MIG quota only (7 × 1g.10gb). ``cq-a`` has 5 GPUs pending.
"""

from __future__ import annotations

from decimal import Decimal

from quotas.ingest.metrics import build_metric_samples

GPU = "nvidia.com/gpu"
MIG3 = "nvidia.com/mig-3g.40gb"
MIG1 = "nvidia.com/mig-1g.10gb"


def _item(queue: str, flavor: str, resource: str | None, value: float, cohort: str = "") -> dict:
    labels = {"cluster_queue": queue, "cohort": cohort, "flavor": flavor}
    if resource is not None:
        labels["resource"] = resource
    return {"metric": labels, "value": [0, str(value)]}


def answers() -> dict[str, list[dict]]:
    return {
        "nominal": [
            _item("cq-a", "h100", GPU, 4, "research"),
            _item("cq-a", "a100-mig", MIG3, 2, "research"),
            _item("cq-b", "a100-mig", MIG3, 4, "research"),
            _item("cq-m", "a100-mig", MIG1, 7),
            _item("cq-m", "a100-mig", "nvidia.com/mig-bogus", 1),
        ],
        "usage": [
            _item("cq-a", "h100", GPU, 4, "research"),
            _item("cq-a", "a100-mig", MIG3, 3, "research"),
            _item("cq-b", "a100-mig", MIG3, 0, "research"),
        ],
        "resource_pending": [{"metric": {"cluster_queue": "cq-a"}, "value": [0, "5"]}],
        "pending_workloads": [
            {"metric": {"cluster_queue": "cq-a"}, "value": [0, "1"]},
            {"metric": {"cluster_queue": "cq-m"}, "value": [0, "2"]},
        ],
    }


def test_mig_quota_is_sampled_per_resource_and_lent_within_it() -> None:
    window = build_metric_samples(answers())
    rows = {(s.cluster_queue_name, s.flavor_name, s.resource): s for s in window.samples}
    assert set(rows) == {
        ("cq-a", "h100", GPU),
        ("cq-a", "a100-mig", MIG3),
        ("cq-b", "a100-mig", MIG3),
        ("cq-m", "a100-mig", MIG1),
    }
    assert window.stats.skip_reasons["kueue_not_a_gpu_resource"] == 1
    mig_a = rows[("cq-a", "a100-mig", MIG3)]
    assert (mig_a.nominal, mig_a.total, mig_a.borrowed) == (Decimal(2), Decimal(3), Decimal(1))
    # cq-b lends the one 3g instance cq-a borrows; whole GPUs lend nothing.
    assert rows[("cq-b", "a100-mig", MIG3)].lent == Decimal(1)
    assert rows[("cq-a", "h100", GPU)].lent == 0
    # The pending demand (GPUs) stays on the whole-GPU flavor, never on a MIG sample.
    assert rows[("cq-a", "h100", GPU)].pending_demand == Decimal(5)
    assert rows[("cq-a", "h100", GPU)].pending_workloads == 1
    assert mig_a.pending_demand == 0 and mig_a.pending_workloads == 0
    # A queue with MIG quota only keeps its counts, without a demand in other units.
    only_mig = rows[("cq-m", "a100-mig", MIG1)]
    assert (only_mig.pending_workloads, only_mig.pending_demand) == (2, 0)

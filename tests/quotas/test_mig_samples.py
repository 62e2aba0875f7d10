"""ClusterQueue samples of MIG quota: one per queue, flavor and MIG resource, in MIG instances,
next to the whole-GPU samples (the rollup weighs them into GPUs, tests/ledger/test_mig_quota.py).
"""

import copy
from decimal import Decimal

from quotas.ingest import (
    build_gpu_queue_samples,
    build_queue_samples,
    build_snapshot,
    snapshot_from_lists,
)
from tests.quotas.test_ingest import NOW, TEAM_LABELS, fixture_lists

MIG = "nvidia.com/mig-3g.40gb"


def _with_mig_queue() -> dict[str, dict]:
    """The recorded lists plus a ClusterQueue ``team-mig`` whose only GPU quota is 4 × 3g.40gb
    in flavor ``a100-mig``, 2 of them in use."""
    lists = fixture_lists("v1beta2")
    queue = copy.deepcopy(lists["cluster_queues"]["items"][0])
    queue["metadata"].update(name="team-mig", uid="00000000-0000-0000-0000-00000000a1a1")
    queue["spec"].pop("cohortName", None)
    queue["spec"]["resourceGroups"] = [
        {
            "coveredResources": [MIG],
            "flavors": [{"name": "a100-mig", "resources": [{"name": MIG, "nominalQuota": "4"}]}],
        }
    ]
    used = [{"name": "a100-mig", "resources": [{"name": MIG, "total": "2", "borrowed": "0"}]}]
    queue["status"]["flavorsUsage"] = used
    queue["status"]["flavorsReservation"] = copy.deepcopy(used)
    lists["cluster_queues"]["items"].append(queue)
    return lists


def test_mig_quota_is_sampled_in_its_own_resource() -> None:
    batch = build_snapshot(snapshot_from_lists(NOW, **_with_mig_queue()), TEAM_LABELS)
    samples = build_gpu_queue_samples(batch)
    mig = [s for s in samples if s.cluster_queue_name == "team-mig"]
    assert [(s.flavor_name, s.resource, s.nominal, s.total) for s in mig] == [
        ("a100-mig", MIG, Decimal(4), Decimal(2))
    ]
    # The whole-GPU samples are those of build_queue_samples, unchanged.
    whole = [s for s in samples if s.resource == "nvidia.com/gpu"]
    assert whole == build_queue_samples(batch)

"""Kubernetes GPU resources and MIG GPU instances: how much of a GPU a profile is
(docs/architecture.md "Upstream facts")."""

import re

from django.db.models import Case, FloatField, Q, Value, When

# The extended resource a whole GPU is requested as; MIG instances are `nvidia.com/mig-<profile>`.
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# A MIG profile `Ng.Mgb` takes N of a GPU's 7 compute slices.
MIG_COMPUTE_SLICES = 7

_PROFILE = re.compile(r"^([1-7])g\.")


def mig_slices(profile: str) -> int | None:
    """Compute slices of a MIG profile ('3g.40gb' -> 3), None when it is not one."""
    match = _PROFILE.match(profile)
    return int(match.group(1)) if match else None


def gpu_share(resource: str) -> float | None:
    """GPUs one unit of a resource stands for: 1 per ``nvidia.com/gpu``, N/7 per MIG ``Ng``
    instance; None when the resource is neither (or names no MIG profile)."""
    if resource == GPU_RESOURCE:
        return 1.0
    if resource.startswith(MIG_RESOURCE_PREFIX):
        slices = mig_slices(resource[len(MIG_RESOURCE_PREFIX) :])
        return None if slices is None else slices / MIG_COMPUTE_SLICES
    return None


def gpu_flavor(flavors: object) -> str:
    """The GPU flavor of a Workload's admission (``{resource: flavor}``): the flavor of its whole
    GPUs, else of its first MIG resource ("" when it was admitted no GPU)."""
    if not isinstance(flavors, dict):
        return ""
    if flavors.get(GPU_RESOURCE):
        return str(flavors[GPU_RESOURCE])
    for resource in sorted(flavors):
        if str(resource).startswith(MIG_RESOURCE_PREFIX) and flavors[resource]:
            return str(flavors[resource])
    return ""


def gpu_resource_q(field: str = "resource") -> Q:
    """Rows whose ``field`` is a GPU resource: whole GPUs or a MIG instance of a known profile."""
    query = Q(**{field: GPU_RESOURCE})
    for slices in range(1, MIG_COMPUTE_SLICES + 1):
        query |= Q(**{f"{field}__startswith": f"{MIG_RESOURCE_PREFIX}{slices}g."})
    return query


def gpu_share_sql(field: str = "resource") -> Case:
    """``gpu_share`` as a SQL expression over ``field`` (0 for any other resource), so that
    amounts of whole GPUs and MIG instances add up in GPUs (docs/architecture.md "Figures")."""
    whens = [When(**{field: GPU_RESOURCE}, then=Value(1.0))]
    whens += [
        When(
            **{f"{field}__startswith": f"{MIG_RESOURCE_PREFIX}{slices}g."},
            then=Value(slices / MIG_COMPUTE_SLICES),
        )
        for slices in range(1, MIG_COMPUTE_SLICES + 1)
    ]
    return Case(*whens, default=Value(0.0), output_field=FloatField())

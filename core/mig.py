"""Kubernetes GPU resources and MIG GPU instances: how much of a GPU a profile is
(docs/architecture.md "Upstream facts")."""

import re

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

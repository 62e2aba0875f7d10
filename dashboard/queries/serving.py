"""What the Serving pages and the team page's serving section read: the deployments a user may
see over a range (``serving.deployments``, the one read of serving hours), sorted for the list,
and one deployment's hours for its page and charts."""

from __future__ import annotations

from collections.abc import Callable

from core.ranges import TimeRange
from quotas.models import Team
from serving.deployments import Deployment, deployment, deployments, team_namespaces_q
from serving.models import ServingWorkload

# The list's sort keys: (label, the value sorted by, highest first). Unknown values sort last.
SORTS: dict[str, tuple[str, Callable[[Deployment], object], bool]] = {
    "name": ("Name", lambda d: (d.workload.namespace, d.workload.name, d.workload.kind), False),
    "gpus": ("Mean GPUs", lambda d: d.mean_gpus, True),
    "tokens_per_gpu_hour": ("Tokens per GPU-hour", lambda d: d.tokens_per_gpu_hour, True),
    "cost_per_million": (
        "Cost per million tokens",
        lambda d: d.cost_per_million_tokens,
        True,
    ),
    "below_knee": ("Hours below half the knee", lambda d: d.below_knee_share, True),
    "sm_active": ("SM_ACTIVE", lambda d: d.sm_active, False),
}
DEFAULT_SORT = "gpus"


def sorted_deployments(found: list[Deployment], sort: str) -> list[Deployment]:
    """``found`` by ``sort`` (``SORTS``); deployments without the figure last, by name."""
    _label, value_of, descending = SORTS[sort]
    known = [d for d in found if value_of(d) is not None]
    unknown = [d for d in found if value_of(d) is None]
    known.sort(key=value_of, reverse=descending)  # type: ignore[arg-type]
    name = SORTS["name"][1]
    unknown.sort(key=name)  # type: ignore[arg-type]
    return known + unknown


def visible_deployments(
    time_range: TimeRange, allowed: set[int] | None, sort: str = DEFAULT_SORT
) -> list[Deployment]:
    """Every deployment with serving hours in the range whose namespace the user sees."""
    return sorted_deployments(deployments(time_range.covered_hours(), allowed=allowed), sort)


def team_deployments(team: Team, time_range: TimeRange) -> list[Deployment]:
    """The team's deployments (those in its namespaces) with hours in the range, most GPUs
    first."""
    found = deployments(time_range.covered_hours(), team_namespaces_q([team.pk]))
    return sorted_deployments(found, DEFAULT_SORT)


def one_deployment(workload: ServingWorkload, time_range: TimeRange) -> Deployment:
    return deployment(workload, time_range.covered_hours())

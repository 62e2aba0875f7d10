"""Who holds a GPU, read from a usage row: the pod, its workload and team, shown or hidden.

A user sees the pods, workloads and team of the holders ``quotas.access`` lets them see; any
other holder shows as "another team", with no link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboard.access import sees_team
from dashboard.frame import quota_url
from quotas.access import ANOTHER_TEAM

# The GpuUsage fields that say who holds a GPU.
HOLDER_IDENTITY = (
    "gpu_id",
    "namespace",
    "pod",
    "workload_id",
    "workload__name",
    "team_id",
    "team__name",
)
# ... and with them, the GPU's reading in that window.
HOLDER_FIELDS = (
    *HOLDER_IDENTITY,
    "allocated",
    "shared",
    "activity",
    "activity_source",
    "gpu_util",
    "gpus",
)


@dataclass
class Holder:
    namespace: str
    pod: str
    workload: str
    workload_id: int | None
    team: str
    team_id: int | None
    visible: bool

    @property
    def label(self) -> str:
        if not self.namespace and not self.pod:
            return "unallocated"
        if not self.visible:
            return ANOTHER_TEAM
        parts = [f"{self.namespace}/{self.pod}"]
        if self.workload:
            parts.append(f"workload {self.workload}")
        if self.team:
            parts.append(f"team {self.team}")
        return " · ".join(parts)


def holder_from_row(row: dict[str, Any], allowed: set[int] | None) -> Holder:
    team_id = row.get("team_id")
    return Holder(
        namespace=row.get("namespace") or "",
        pod=row.get("pod") or "",
        workload=row.get("workload__name") or "",
        workload_id=row.get("workload_id"),
        team=row.get("team__name") or "",
        team_id=team_id,
        visible=sees_team(allowed, team_id),
    )


def holder_urls(holder: Holder) -> dict[str, str | None]:
    """Links to the holder's workload and team pages; none for a holder the user may not see."""
    if not holder.visible:
        return {"workload_url": None, "team_url": None}
    return {
        "workload_url": quota_url("dashboard:workload-detail", holder.workload_id),
        "team_url": quota_url("dashboard:team-detail", holder.team),
    }

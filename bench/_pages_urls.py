"""The pages bench/pages.py requests: the ids and names of objects that exist (``Sample``) and
the URL groups built from them. To add pages, append a function to ``URL_GROUPS``: it gets the
``Sample`` and returns ``(label, path)`` pairs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Sample:
    node_id: int
    gpu_id: int
    team_name: str
    cluster_name: str
    cluster_queue_name: str
    cohort_name: str
    workload_id: int


def fleet_urls(s: Sample) -> list[tuple[str, str]]:
    return [
        ("overview 24h", "/"),
        ("overview 30d", "/?range=30d"),
        ("chart capacity 24h", "/fleet/charts/capacity.json"),
        ("chart capacity 30d", "/fleet/charts/capacity.json?range=30d"),
        ("chart team idle 30d", "/fleet/charts/team-idle.json?range=30d"),
        ("chart team active 30d", "/fleet/charts/team-active.json?range=30d"),
        ("fleet map p1", "/fleet/map/"),
        ("fleet map p40 h100", "/fleet/map/?flavor=h100&page=20"),
        ("fleet map search", "/fleet/map/?q=0123"),
        ("chart map p1", "/fleet/charts/map.json"),
        ("chart map mean 24h", "/fleet/charts/map.json?value=mean"),
        ("node", f"/fleet/nodes/{s.node_id}/"),
        ("chart node 24h", f"/fleet/charts/nodes/{s.node_id}/activity.json"),
        ("gpu", f"/fleet/gpus/{s.gpu_id}/"),
        ("chart gpu activity", f"/fleet/charts/gpus/{s.gpu_id}/activity.json"),
        ("chart gpu memory", f"/fleet/charts/gpus/{s.gpu_id}/memory.json"),
        ("busy 24h", "/fleet/busy/"),
        ("busy 30d", "/fleet/busy/?range=30d"),
        ("chart busy teams 30d", "/fleet/charts/busy-teams.json?range=30d"),
        ("chart busy time 30d", "/fleet/charts/busy-over-time.json?range=30d"),
    ]


# The quota pages add their own function here.
def quota_urls(s: Sample) -> list[tuple[str, str]]:
    team = f"/teams/{s.team_name}/"
    cohort = f"/cohorts/{s.cluster_name}/{s.cohort_name}/"
    queue = f"/queues/{s.cluster_name}/{s.cluster_queue_name}/"
    workload = f"/workloads/{s.workload_id}/"
    return [
        ("teams 24h", "/teams/"),
        ("teams 30d", "/teams/?range=30d"),
        ("team 24h", team),
        ("team 30d", f"{team}?range=30d"),
        ("chart team allocation 30d", f"{team}charts/allocation.json?range=30d"),
        ("chart team queues 30d", f"{team}charts/queues.json?range=30d"),
        ("cohorts", "/cohorts/"),
        ("cohort 24h", cohort),
        ("chart cohort usage 30d", f"{cohort}charts/usage.json?range=30d"),
        ("chart cohort borrowing 30d", f"{cohort}charts/borrowing.json?range=30d"),
        ("queues p1", "/queues/"),
        ("queues p10", "/queues/?page=10"),
        ("queue 24h", queue),
        ("chart queue usage 30d", f"{queue}charts/usage.json?range=30d"),
        ("chart queue evictions 30d", f"{queue}charts/evictions.json?range=30d"),
        ("workload 24h", workload),
        ("chart workload timeline", f"{workload}charts/timeline.json"),
        ("chart workload sm 24h", f"{workload}charts/activity.json"),
        ("chart workload tensor 30d", f"{workload}charts/activity.json?range=30d&metric=tensor"),
    ]


def lead_urls(s: Sample) -> list[tuple[str, str]]:
    """The workload list, the navigation search and the chargeback page (staff: every team)."""
    return [
        ("workloads newest", "/workloads/"),
        ("workloads by gpu-hours 24h", "/workloads/?sort=gpu_hours"),
        ("workloads by cost 30d", "/workloads/?sort=cost&range=30d"),
        ("workloads search", "/workloads/?q=job-00&state=finished"),
        ("search", "/search/?q=0012"),
        ("chargeback team 30d", "/chargeback/?range=30d"),
        ("chargeback queue day 30d", "/chargeback/?range=30d&group_by=cluster_queue&step=day"),
    ]


URL_GROUPS: list[Callable[[Sample], list[tuple[str, str]]]] = [fleet_urls, quota_urls, lead_urls]

"""One answer everywhere: every figure that appears in two places agrees, on the simulated fleet.

The world is the demo's (``manage.py simulate``, one day at 30-minute windows, through the real
ingest path): MIG instances, a time-sliced GPU, A100 nodes that export only GR_ENGINE_ACTIVE,
workloads pending for a100 in a queue whose first flavor is h100, borrowing in the research
cohort and an idle notebook. Every page and API is read for one range (the last 24 hours).

A comparison is a function decorated with ``@compares("what")`` that takes the ``Reads`` (pages
and APIs, each read once and cached) and returns, per subject (a team, the fleet), the
``(where, value)`` pairs that must all be equal; ``test_every_figure_agrees_where_it_appears_twice``
runs each. Add one by writing a function: the figure, the places it appears, read from what the
reader sees (the page's context, its cards, its chart JSON, the API's JSON).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.pages.built_once import build_once

END = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=20)
RANGE = {"range": "24h"}
# The chargeback window of the same hours: the 24 that ended by NOW.
WINDOW = {
    "start": (END - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "end": END.strftime("%Y-%m-%dT%H:%M:%SZ"),
}
TOLERANCE = 0.051  # pages print one decimal

Pairs = list[tuple[str, float]]
Compared = dict[str, Pairs]  # subject → the places it appears, with their values
COMPARISONS: dict[str, Callable[[Reads], Compared]] = {}


def compares(what: str) -> Callable[[Callable[[Reads], Compared]], Callable[[Reads], Compared]]:
    def register(function: Callable[[Reads], Compared]) -> Callable[[Reads], Compared]:
        COMPARISONS[what] = function
        return function

    return register


def number(text: str) -> float:
    """A card's printed number ("1,234.5", "12") as a float."""
    match = re.search(r"-?[\d,]+(?:\.\d+)?", text)
    assert match, f"no number in {text!r}"
    return float(match.group().replace(",", ""))


def cards(response: Any, key: str = "cards") -> dict[str, dict[str, Any]]:
    return {card.get("testid"): card for card in response.context[key]}


class Reads:
    """The pages and APIs of the range, each read once."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def page(self, name: str, *args: Any, **params: str) -> Any:
        response = self.client.get(reverse(name, args=args), {**RANGE, **params})
        assert response.status_code == 200, name
        return response

    @cached_property
    def overview(self) -> Any:
        return self.page("dashboard:overview")

    @cached_property
    def busy(self) -> Any:
        return self.page("dashboard:busy")

    @cached_property
    def teams(self) -> Any:
        return self.page("dashboard:team-list")

    def chargeback(self, group_by: str) -> dict[str, Any]:
        response = self.client.get(reverse("api-chargeback"), {**WINDOW, "group_by": group_by})
        assert response.status_code == 200, response.content[:300]
        return response.json()


@compares("busy but not working now (GPUs)")
def busy_now(reads: Reads) -> Compared:
    busy = reads.busy
    return {
        "fleet": [
            ("overview FleetNow.busy", reads.overview.context["now"].busy),
            ("busy page card", number(cards(busy)["busy-now"]["value"])),
            ("busy page GPU table", sum(row["gpus"] for row in busy.context["gpus_now"])),
        ]
    }


@compares("busy but not working over the range (GPU-h)")
def busy_hours(reads: Reads) -> Compared:
    busy = reads.busy
    return {
        "fleet": [
            ("busy page card", number(cards(busy)["busy-hours"]["value"])),
            (
                "busy page teams",
                sum(team.figures.busy_not_working_gpu_hours for team in busy.context["teams"]),
            ),
        ]
    }


@compares("allocated GPU-h over the range, fleet")
def allocated_fleet(reads: Reads) -> Compared:
    return {
        "fleet": [
            (
                "overview flavors",
                sum(f.figures.allocated_gpu_hours for f in reads.overview.context["flavors"]),
            ),
            ("chargeback by flavor", reads.chargeback("flavor")["totals"]["allocated_gpu_hours"]),
            ("chargeback by team", reads.chargeback("team")["totals"]["allocated_gpu_hours"]),
            ("chargeback by cluster", reads.chargeback("cluster")["totals"]["allocated_gpu_hours"]),
            ("busy page share's denominator", number(cards(reads.busy)["busy-share"]["note"])),
        ]
    }


@compares("idle GPU-h over the range, per team")
def idle_per_team(reads: Reads) -> Compared:
    rows = {row["group"]: row for row in reads.chargeback("team")["rows"]}
    compared: Compared = {}
    for team in reads.overview.context["teams"]:
        if team.key in rows:
            compared[team.key] = [
                ("overview team table", team.figures.idle_gpu_hours),
                ("chargeback", rows[team.key]["idle_gpu_hours"]),
            ]
    assert compared, "no team in both"
    return compared


@compares("GPU-hours and cost per workload over the range")
def workload_charges(reads: Reads) -> Compared:
    listed = reads.page("dashboard:workload-list", sort="gpu_hours").context["rows"]
    rows = {row["group"]: row for row in reads.chargeback("workload")["rows"]}
    compared: Compared = {}
    for row in listed[:10]:
        workload = row["workload"]
        charged = rows.get(f"{workload.namespace}/{workload.name}")
        if charged is None or not charged["allocated_gpu_hours"]:
            continue
        compared[f"{workload.name} GPU-h"] = [
            ("workload list", number(row["gpu_hours"])),
            ("chargeback", round(charged["allocated_gpu_hours"], 1)),
        ]
        compared[f"{workload.name} cost"] = [
            ("workload list", number(row["cost"])),
            ("chargeback", charged["cost"]["total"]),
        ]
    assert compared, "no workload in both"
    return compared


@compares("pending GPUs now, by flavor, on the overview")
def pending_now(reads: Reads) -> Compared:
    now = reads.overview.context["now"]
    waits = reads.overview.context["waits"]
    requesting = sum(gpus for gpus, _count in now.pending_by_queue.values())
    return {
        "fleet": [
            ("pending-while-free per flavor, summed", sum(wait.pending for wait in waits)),
            ("pending workloads that request GPUs", requesting),
        ]
    }


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    def build() -> None:
        call_command(
            "simulate",
            "--days",
            "1",
            "--step",
            "1800",
            "--seed",
            "42",
            "--end",
            END.isoformat(),
        )

    yield from build_once(django_db_blocker, build, NOW)


@pytest.fixture
def reads(world, db, time_machine, staff_client) -> Reads:
    time_machine.move_to(NOW, tick=False)
    return Reads(staff_client)


@pytest.mark.parametrize("what", sorted(COMPARISONS))
def test_every_figure_agrees_where_it_appears_twice(reads, what):
    for subject, pairs in COMPARISONS[what](reads).items():
        assert len(pairs) >= 2, f"{what}: a comparison needs two places"
        first_where, first = pairs[0]
        for where, value in pairs[1:]:
            assert value == pytest.approx(first, abs=TOLERANCE), (
                f"{what}, {subject}: {first_where} says {first}, {where} says {value}"
            )


def test_the_world_has_what_the_comparisons_need(reads):
    """The scenario's elements, so a comparison cannot pass on an empty fleet."""
    from fleet.choices import ActivitySource
    from fleet.models import Gpu
    from ledger.models import GpuUsage
    from quotas.models import Workload

    assert Gpu.objects.exclude(gi_id="").exists()  # MIG
    assert GpuUsage.objects.filter(shared=True).exists()  # time-slicing
    assert GpuUsage.objects.filter(activity_source=ActivitySource.GR_ENGINE_ACTIVE).exists()
    assert any("flavor a100" in w.state_message for w in Workload.objects.pending())
    assert reads.chargeback("team")["totals"]["borrowed_gpu_hours"] > 0
    assert reads.overview.context["now"].busy > 0
    assert reads.overview.context["now"].idle > 0


@compares("nominal GPU-h over the range, MIG quota at slices/7")
def mig_nominal(reads: Reads) -> Compared:
    """The platform queue's quota is 8 whole A100s plus MIG instances (1g, 2g, 3g): its nominal
    GPU-hours are its spec's quota in GPUs (a MIG ``Ng`` instance N/7 of one) × the range's 24
    hours, worked out here from the stored quota, not from the rollups the pages read."""
    from core.mig import gpu_share
    from quotas.models import ClusterQueueQuota

    quotas = ClusterQueueQuota.objects.filter(cluster_queue__name="platform")
    kinds = set(quotas.values_list("resource", flat=True))
    assert "nvidia.com/gpu" in kinds and any(k.startswith("nvidia.com/mig-") for k in kinds)
    gpus = sum(float(q.nominal) * (gpu_share(q.resource) or 0.0) for q in quotas)
    teams = {row["group"]: row for row in reads.chargeback("team")["rows"]}
    queues = {row["group"]: row for row in reads.chargeback("cluster_queue")["rows"]}
    return {
        "platform": [
            ("spec quota in GPUs × 24 h", round(gpus * 24, 1)),
            ("chargeback by team", teams["platform"]["nominal_gpu_hours"]),
            ("chargeback by queue", queues["platform"]["nominal_gpu_hours"]),
        ]
    }


@compares("an idle workload's alert and its workload page: wasted GPU-h and cost")
def alert_vs_workload(reads: Reads) -> Compared:
    """The idle workload episode that wasted the most, on the episode page and in the alerts
    API, against its workload page over its life: the same ended hours, the same rate card
    (README "Which hours a range counts", docs/architecture.md "Hoarding alerts")."""
    from alerts.choices import Rule
    from alerts.models import Episode

    episode = (
        Episode.objects.filter(rule=Rule.IDLE_WORKLOAD, workload__isnull=False)
        .order_by("-idle_gpu_hours")
        .first()
    )
    assert episode is not None and episode.workload is not None, [
        (e.rule, e.subject_key) for e in Episode.objects.all()
    ]
    # The workload page over its whole life counts the hours the episode's GPUs were held; the
    # episode covers the idle part of them, all of it for a notebook idle since it started.
    alert = reads.client.get(reverse("dashboard:episode-detail", args=[episode.pk]))
    page = reads.client.get(reverse("dashboard:workload-detail", args=[episode.workload_id]))
    api = reads.client.get(reverse("alert-detail", args=[episode.pk])).json()
    alert_cards = {card["testid"]: card for card in alert.context["stats"]}
    page_cards = {card["testid"]: card for card in page.context["stats"]}
    return {
        f"{episode.workload.name} wasted GPU-h": [
            ("episode page", number(alert_cards["stat-idle"]["value"])),
            ("alerts API, through the last ended hour", round(api["ended_idle_gpu_hours"], 1)),
            ("workload page idle GPU-hours", number(page_cards["stat-idle"]["note"])),
        ],
        f"{episode.workload.name} cost": [
            ("episode page", number(alert_cards["stat-cost"]["value"])),
            ("alerts API", round(float(api["ended_cost"]), 2)),
            ("workload page", number(page_cards["stat-cost"]["value"])),
        ],
    }


# Registered after ``test_every_figure_agrees_where_it_appears_twice`` took its list: run here.
LATE_COMPARISONS = [
    "nominal GPU-h over the range, MIG quota at slices/7",
    "an idle workload's alert and its workload page: wasted GPU-h and cost",
]


@pytest.mark.parametrize("what", LATE_COMPARISONS)
def test_mig_quota_and_alert_figures_agree(reads, what):
    test_every_figure_agrees_where_it_appears_twice(reads, what)

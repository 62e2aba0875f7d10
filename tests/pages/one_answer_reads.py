"""What the one-answer test reads: the pages and APIs of one range, each read once, and the
small parsers and perturbations its comparisons and its meta-test use."""

from __future__ import annotations

import dataclasses
import functools
import re
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

END = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=20)
RANGE = {"range": "24h"}
# The chargeback window of the same hours: the 24 that ended by NOW.
WINDOW = {
    "start": (END - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "end": END.strftime("%Y-%m-%dT%H:%M:%SZ"),
}
TOLERANCE = 0.051  # pages print one decimal


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

    @functools.cache  # noqa: B019 (one Reads per test)
    def chargeback(self, group_by: str) -> dict[str, Any]:
        response = self.client.get(reverse("api-chargeback"), {**WINDOW, "group_by": group_by})
        assert response.status_code == 200, response.content[:300]
        return response.json()

    @functools.cache  # noqa: B019
    def allocation(self, aggregate: str) -> dict[str, Any]:
        """The OpenCost allocation API for the same hours, as name → allocation."""
        window = f"{WINDOW['start']},{WINDOW['end']}"
        response = self.client.get(
            reverse("api-allocation"), {"window": window, "aggregate": aggregate}
        )
        assert response.status_code == 200, response.content[:300]
        (sets,) = response.json()["data"]
        return dict(sets)

    @functools.cache  # noqa: B019
    def api_list(self, name: str) -> list[dict[str, Any]]:
        """Every result of a list endpoint of the REST API (all its pages)."""
        url: str | None = f"/api/v1/{name}/"
        results: list[dict[str, Any]] = []
        while url:
            response = self.client.get(url)
            assert response.status_code == 200, response.content[:300]
            body = response.json()
            results.extend(body["results"])
            url = body["next"]
        return results

    @cached_property
    def my_teams(self) -> Any:
        """My teams as the lead of every team sees it."""
        from django.contrib.auth import get_user_model

        from quotas.models import Team

        lead, _ = get_user_model().objects.get_or_create(username="lead-of-all")
        for team in Team.objects.all():
            team.leads.add(lead)
        client = Client()
        client.force_login(lead)
        response = client.get(reverse("dashboard:my-teams"), RANGE)
        assert response.status_code == 200
        assert response.context["cards"], "My teams is empty"
        return response

    @functools.cache  # noqa: B019
    def team(self, name: str) -> Any:
        return self.page("dashboard:team-detail", name)

    @functools.cache  # noqa: B019
    def queue(self, name: str) -> Any:
        from quotas.models import ClusterQueue

        queue = ClusterQueue.objects.select_related("cluster").get(name=name)
        return self.page("dashboard:cluster-queue-detail", queue.cluster.name, name)

    @cached_property
    def cohorts(self) -> list[str]:
        from quotas.models import Cohort

        return sorted(Cohort.objects.values_list("name", flat=True))

    @functools.cache  # noqa: B019
    def cohort(self, name: str) -> Any:
        from quotas.models import Cohort

        cohort = Cohort.objects.select_related("cluster").get(name=name)
        return self.page("dashboard:cohort-detail", cohort.cluster.name, name)

    @cached_property
    def cohort_members(self) -> dict[str, dict[str, Any]]:
        """Every cohort page's member rows, by the member queue's team (one queue per team)."""
        return {
            row["queue"].team.name: row
            for name in self.cohorts
            for row in self.cohort(name).context["member_rows"]
        }

    @cached_property
    def map_rows(self) -> list[dict[str, Any]]:
        response = self.page("dashboard:map", per_page="100")
        assert not response.context["page_obj"].has_next()
        return list(response.context["rows"])

    @cached_property
    def special_nodes(self) -> dict[str, str]:
        """A node of each kind: MIG, time-sliced, GR_ENGINE_ACTIVE only, plain H100."""
        from fleet.choices import ActivitySource
        from fleet.models import Gpu
        from ledger.models import GpuUsage

        def node_of(rows: Any) -> str:
            return str(rows.values_list("node_name", flat=True).order_by("node_name")[0])

        return {
            "mig": str(Gpu.objects.exclude(gi_id="").values_list("node__name", flat=True).first()),
            "shared": node_of(GpuUsage.objects.filter(shared=True)),
            "gr_engine": node_of(
                GpuUsage.objects.filter(activity_source=ActivitySource.GR_ENGINE_ACTIVE)
            ),
            "h100": node_of(GpuUsage.objects.filter(flavor="h100")),
        }

    def held_by_pods(self, workload: Any) -> float:
        """GPUs of the newest collected window held by the workload's running pods."""
        from django.db.models import Max

        from ledger.models import GpuUsage

        newest = GpuUsage.objects.aggregate(end=Max("window_end"))["end"]
        rows = GpuUsage.objects.filter(window_end=newest, allocated=True, workload=workload)
        return float(sum(row.gpus for row in rows))

    def preview_reason(self, queue: Any, workload: Any) -> str:
        """The quota-change preview's sentence for ``workload`` when ``queue`` keeps its quota."""
        from quotas.writeback.state import synced_cells, whatif_inputs
        from quotas.writeback.whatif import what_if

        cells = synced_cells(queue)
        summary = what_if(whatif_inputs(queue, cells, cells, NOW))
        name = f"{workload.namespace}/{workload.name}"
        (row,) = [row for row in summary["pending"] if row["name"] == name]
        return str(row["reason"])


def by_team(rows: list[dict[str, Any]], key: str = "group") -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


def chart_bars(chart: dict[str, Any], trace: int = 0) -> dict[str, float]:
    """A horizontal bar chart's JSON as label → value (the figure the reader hovers)."""
    data = chart["data"][trace]
    return dict(zip(data["y"], (float(x) for x in data["x"]), strict=True))


def one(rows: list[dict[str, Any]], workload: Any) -> str:
    (row,) = [row for row in rows if row["workload"].pk == workload.pk]
    return row["short_reason"]


def agrees(first: Any, value: Any) -> bool:
    if isinstance(first, str):
        return bool(value == first)
    return bool(value == pytest.approx(first, abs=TOLERANCE))


def inflate(value: Any) -> Any:
    """Every number in ``value`` made larger (ids and flags aside): one side's figures, wrong."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return value * 1.5 + 1
    if isinstance(value, dict):
        return {key: inflate(item) for key, item in value.items()}
    if isinstance(value, list):
        return [inflate(item) for item in value]
    if isinstance(value, tuple):
        return tuple(inflate(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {
            f.name: inflate(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init
        }
        return dataclasses.replace(value, **changed)
    return value


def total_inflated(result: tuple[Any, float]) -> tuple[Any, float]:
    """Rows as they are, their total larger (the rows carry ids a page links to)."""
    rows, total = result
    return rows, inflate(total)


def misprinted(text: str) -> str:
    """A printed number with a digit too many ("4" → "41")."""
    return f"{text}1" if text else text


def reworded(sentence: str) -> str:
    return f"{sentence} (reworded)"


def hotter(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "activity_pct": (row["activity_pct"] or 0.0) + 10.0} for row in rows]

"""One range, one number on every page (docs/architecture.md "Read layer"): the overview's team
table, the team list, a team page, the cohort page's members and
``/api/v1/chargeback/?group_by=team`` give the same allocated, active and idle GPU-hours per team;
the ClusterQueue page, the team page, the cohort page and ``/api/v1/cluster-queues/`` the same GPUs
borrowed now.

Scenario, clock frozen at 12:30 on 2026-03-10, range from 08:00 (``?start=2026-03-10T08:00``,
ending now). Cohort "research": team alpha's ClusterQueue cq-alpha, team beta's cq-beta, one
flavor each. Every hour from 08:00 to 11:00, team- and ClusterQueue-scope rollups:

- alpha: 4 GPU-hours allocated, 2.5 active, 0.5 idle; beta: 2 allocated, 1.25 active, 0.25 idle.
- 12:00, the hour in progress, already has a partial row (alpha 1.5 allocated, 0.5 active,
  1 idle; beta 1 allocated, 1 idle): it must count nowhere. Before the read layer, the team
  list, the team page and the cohort members counted it and the overview did not.
- 07:00 (before the range): 100 allocated for alpha, counted nowhere.

So over the range: alpha 16 allocated, 10 active, 2 idle; beta 8, 5 and 1.

Borrowed now: cq-alpha's newest h100 sample (a minute ago) borrows 3 (an older one 5, not
counted), its a100 sample 1: 4 GPUs; cq-beta lends and borrows none.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser

import pytest
import time_machine
from django.urls import reverse

from dashboard.templatetags.formatting import figure
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.models import ClusterQueue, ClusterQueueSample, Cohort, Team

NOW = datetime(2026, 3, 10, 12, 30, tzinfo=UTC)
START = datetime(2026, 3, 10, 8, tzinfo=UTC)
OPEN_HOUR = datetime(2026, 3, 10, 12, tzinfo=UTC)
BEFORE = datetime(2026, 3, 10, 7, tzinfo=UTC)
COUNTED = [START + timedelta(hours=i) for i in range(4)]  # 08:00 … 11:00
RANGE = {"start": "2026-03-10T08:00"}
# The chargeback's window is on whole hours and may reach past now: it counts the hours ended.
WINDOW = {"start": "2026-03-10T08:00:00Z", "end": "2026-03-10T13:00:00Z", "group_by": "team"}

FLAVORS = {"alpha": "h100", "beta": "a100"}
PER_HOUR = {
    "alpha": {"allocated_gpu_hours": 4.0, "active_gpu_hours": 2.5, "idle_gpu_hours": 0.5},
    "beta": {"allocated_gpu_hours": 2.0, "active_gpu_hours": 1.25, "idle_gpu_hours": 0.25},
}
IN_PROGRESS = {
    "alpha": {"allocated_gpu_hours": 1.5, "active_gpu_hours": 0.5, "idle_gpu_hours": 1.0},
    "beta": {"allocated_gpu_hours": 1.0, "active_gpu_hours": 0.0, "idle_gpu_hours": 1.0},
}
EXPECTED = {
    "alpha": {"allocated": 16.0, "active": 10.0, "idle": 2.0},
    "beta": {"allocated": 8.0, "active": 5.0, "idle": 1.0},
}
BORROWED_NOW = 4


@pytest.fixture
def scenario(cluster):
    cohort = Cohort.objects.create(cluster=cluster, name="research")
    teams, queues = {}, {}
    for name in FLAVORS:
        teams[name] = Team.objects.create(name=name, display_name=name.capitalize())
        queues[name] = ClusterQueue.objects.create(
            cluster=cluster,
            name=f"cq-{name}",
            team=teams[name],
            cohort=cohort,
            cohort_name="research",
        )

    def rollups(name: str, hour: datetime, figures: dict[str, float]) -> list[HourlyRollup]:
        common = {"cluster": cluster, "hour": hour, "flavor": FLAVORS[name], "windows": 60}
        # Telemetry on every allocated GPU-hour: utilization = active / allocated.
        values = {**figures, "telemetry_gpu_hours": figures["allocated_gpu_hours"]}
        return [
            HourlyRollup(scope=RollupScope.TEAM, key=name, team=teams[name], **common, **values),
            HourlyRollup(
                scope=RollupScope.CLUSTER_QUEUE,
                key=f"cq-{name}",
                team=teams[name],
                cluster_queue=queues[name],
                **common,
                **values,
            ),
        ]

    rows = []
    for name in ("alpha", "beta"):
        for hour in COUNTED:
            rows += rollups(name, hour, PER_HOUR[name])
        rows += rollups(name, OPEN_HOUR, IN_PROGRESS[name])
    rows += rollups(
        "alpha",
        BEFORE,
        {"allocated_gpu_hours": 100.0, "active_gpu_hours": 100.0, "idle_gpu_hours": 0.0},
    )
    HourlyRollup.objects.bulk_create(rows)

    def sample(queue: ClusterQueue, flavor: str, minutes: int, **values: int) -> None:
        ClusterQueueSample.objects.create(
            cluster_queue=queue,
            flavor_name=flavor,
            resource="nvidia.com/gpu",
            sampled_at=NOW - timedelta(minutes=minutes),
            **{name: Decimal(value) for name, value in values.items()},
        )

    sample(queues["alpha"], "h100", 5, total=13, borrowed=5, nominal=8)
    sample(queues["alpha"], "h100", 1, total=11, borrowed=3, nominal=8)
    sample(queues["alpha"], "a100", 1, total=3, borrowed=1, nominal=2)
    sample(queues["beta"], "a100", 1, total=2, lent=2, nominal=4)
    return teams, queues


class Rendered(HTMLParser):
    """A page as it renders: the text of every ``data-testid`` element, the rows (cell texts)
    of every table that has one, and its stat cards' formatted values."""

    def __init__(self, html: str, stats: dict[str, str]) -> None:
        super().__init__()
        self.stats = stats
        self.by_testid: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self._open: list[tuple[str, str | None]] = []  # (tag, testid) of open elements
        self._texts: dict[int, list[str]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        testid = dict(attrs).get("data-testid")
        if tag == "table" and testid:
            self._table = testid
            self.tables[testid] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        if tag in ("br", "img", "input", "meta", "link"):
            return
        self._open.append((tag, testid))
        if testid:
            self._texts[len(self._open)] = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            if self._row:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        while self._open:
            depth = len(self._open)
            open_tag, testid = self._open.pop()
            if testid:
                self.by_testid[testid] = " ".join("".join(self._texts.pop(depth)).split())
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        for texts in self._texts.values():
            texts.append(data)

    def rows_by_first_cell(self, table: str) -> dict[str, list[str]]:
        return {row[0]: row for row in self.tables[table][1:]}  # row 0: the headers


def page(client, url: str, params: dict[str, str] | None = None) -> Rendered:
    with time_machine.travel(NOW, tick=False):
        response = client.get(url, params or {})
    assert response.status_code == 200, response.content[:500]
    cards = response.context.get("stats") or response.context.get("cards") or []
    stats = {card["testid"]: card["value"] for card in cards if card["testid"]}
    return Rendered(response.content.decode(), stats)


def as_rendered(value: float) -> str:
    """How every page writes a GPU-hour figure (``formatting.figure``)."""
    return figure(value)


def test_every_page_and_the_chargeback_give_each_team_the_same_gpu_hours(staff_client, scenario):
    with time_machine.travel(NOW, tick=False):
        charge = staff_client.get("/api/v1/chargeback/", WINDOW)
    assert charge.status_code == 200, charge.content[:500]
    api = {row["group"]: row for row in charge.json()["rows"]}

    overview = page(staff_client, reverse("dashboard:overview"), RANGE).rows_by_first_cell(
        "teams-table"
    )
    team_list = page(staff_client, reverse("dashboard:team-list"), RANGE).rows_by_first_cell(
        "team-table"
    )
    members = {
        row[1]: row
        for row in page(
            staff_client, reverse("dashboard:cohort-detail", args=["test", "research"]), RANGE
        ).tables["member-table"][1:]
    }

    for name, expected in EXPECTED.items():
        label = name.capitalize()
        team_page = page(staff_client, reverse("dashboard:team-detail", args=[name]), RANGE)
        # The API: hand-computed sums of the hours that ended (not the 12:00 row).
        assert api[name]["allocated_gpu_hours"] == pytest.approx(expected["allocated"])
        assert api[name]["active_gpu_hours"] == pytest.approx(expected["active"])
        assert api[name]["idle_gpu_hours"] == pytest.approx(expected["idle"])
        allocated = as_rendered(api[name]["allocated_gpu_hours"])
        active = as_rendered(api[name]["active_gpu_hours"])
        idle = as_rendered(api[name]["idle_gpu_hours"])
        # Overview: Team, Allocated, Active, Utilization, Idle, ...
        assert (overview[label][1], overview[label][2], overview[label][4]) == (
            allocated,
            active,
            idle,
        ), name
        # Team list: Team, Allocated, Nominal, Real use, Utilization, Idle, ...
        assert (team_list[label][1], team_list[label][3], team_list[label][5]) == (
            allocated,
            active,
            idle,
        ), name
        # Team page: the subtitle's GPU-hours and the idle card.
        assert team_page.by_testid["range-allocated"] == allocated, name
        assert team_page.by_testid["range-active"] == active, name
        assert team_page.stats["stat-idle"] == idle, name
        # Cohort members (one ClusterQueue per team): ClusterQueue, Team, Allocated, Real use,
        # Idle, ...
        assert (members[label][2], members[label][3], members[label][4]) == (
            allocated,
            active,
            idle,
        ), name


def test_the_utilization_every_page_shows_is_the_ratio_of_those_hours(staff_client, scenario):
    overview = page(staff_client, reverse("dashboard:overview"), RANGE).rows_by_first_cell(
        "teams-table"
    )
    team_list = page(staff_client, reverse("dashboard:team-list"), RANGE).rows_by_first_cell(
        "team-table"
    )
    alpha = page(staff_client, reverse("dashboard:team-detail", args=["alpha"]), RANGE)

    # 10 active of 16 allocated-with-telemetry GPU-hours (with the 12:00 row: 10.5 / 17.5).
    assert overview["Alpha"][3] == "62.5 %"
    assert team_list["Alpha"][4] == "62.5 %"
    assert alpha.stats["stat-utilization"] == "62.5"


def test_the_queue_team_and_cohort_pages_and_the_api_agree_on_borrowed_now(staff_client, scenario):
    with time_machine.travel(NOW, tick=False):
        items = staff_client.get("/api/v1/cluster-queues/", {"name": "cq-alpha"}).json()["results"]
    api = items[0]["gpus_now"]["borrowed"]

    queue = page(staff_client, reverse("dashboard:cluster-queue-detail", args=["test", "cq-alpha"]))
    team = page(staff_client, reverse("dashboard:team-detail", args=["alpha"]))
    cohort = page(staff_client, reverse("dashboard:cohort-detail", args=["test", "research"]))
    members = cohort.rows_by_first_cell("member-table")

    assert api == BORROWED_NOW
    shown = as_rendered(api)
    assert queue.stats["stat-borrowed"] == shown
    assert team.stats["stat-borrowed"] == shown  # alpha has one queue
    assert cohort.stats["stat-borrowed"] == shown  # beta borrows none
    # Members: ClusterQueue, Team, 3 range columns, Nominal, In use now, Borrowed now, …
    assert members["cq-alpha"][7] == shown


def test_the_charts_plot_exactly_the_hours_the_tables_count(staff_client, scenario):
    def chart(name: str, *args: str) -> dict:
        with time_machine.travel(NOW, tick=False):
            response = staff_client.get(reverse(name, args=args), RANGE)
        assert response.status_code == 200, response.content[:500]
        return response.json()

    team = chart("dashboard:team-chart-allocation", "alpha")
    cohort = chart("dashboard:cohort-chart-usage", "test", "research")
    allocated = next(trace for trace in team["data"] if trace["name"] == "Allocated")
    members = {trace["name"]: trace for trace in cohort["data"]}

    # One point per counted hour, 08:00 to 11:00: no 07:00, no 12:00 in progress.
    assert [datetime.fromisoformat(x) for x in allocated["x"]] == COUNTED
    # GPU-hours per hour summed over the hours: the tables' allocated GPU-hours.
    assert sum(allocated["y"]) == pytest.approx(EXPECTED["alpha"]["allocated"])
    assert sum(members["cq-beta"]["y"]) == pytest.approx(EXPECTED["beta"]["allocated"])

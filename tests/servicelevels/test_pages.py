"""Queue service levels on the pages, through the Django client: the team-visibility policy
(hidden = the same 404 as missing; another team's queue and workload never named) and the wait
chart's values against ``tests/pages/queue_levels_world`` (computed by hand there)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from tests.pages.queue_levels_world import build

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(cluster, django_user_model):
    lead = django_user_model.objects.create_user("alpha-lead", password="x")
    staff = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    found = build(cluster, lead, timezone.now())
    found.users = {"lead": lead, "staff": staff}  # type: ignore[attr-defined]
    return found


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_lead_sees_only_their_records_and_no_other_team_by_name(world, settings):
    settings.GPULEDGER_TEAM_VISIBILITY = "private"
    lead = client_of(world.users["lead"])
    page = lead.get("/queue-levels/?range=7d").content.decode()
    assert "alpha-cq" in page and "a queue of another team" in page
    assert "beta" not in page
    chart = lead.get("/queue-levels/charts/waits.json?range=7d").json()
    assert {trace["name"] for trace in chart["data"]} == {"alpha-cq p95", "alpha-cq p50"}
    workload = lead.get(f"/workloads/{world.workloads['alpha-wait'].pk}/").content.decode()
    assert "a workload of another team" in workload and "beta-main" not in workload
    # Beta's queue chart and workload: the same refusal as something that does not exist.
    hidden = lead.get("/queues/test/beta-cq/charts/waits.json")
    missing = lead.get("/queues/test/no-such-cq/charts/waits.json")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json()
    assert lead.get("/teams/beta/charts/waits.json").json() == missing.json()
    assert lead.get(f"/workloads/{world.workloads['beta-victim'].pk}/").status_code == 404


def test_staff_see_every_queue_and_the_preemptor_by_name(world):
    staff = client_of(world.users["staff"])
    page = staff.get("/queue-levels/?range=7d").content.decode()
    assert "beta-cq" in page and "a queue of another team" not in page
    workload = staff.get(f"/workloads/{world.workloads['alpha-wait'].pk}/").content.decode()
    assert "ns-beta/beta-main" in workload


def test_the_wait_chart_plots_each_period_in_minutes(world):
    staff = client_of(world.users["staff"])
    chart = staff.get("/queues/test/beta-cq/charts/waits.json?range=7d").json()
    p95 = next(trace for trace in chart["data"] if trace["name"] == "beta-cq p95")
    # A 7-day range is plotted per UTC day: 8 periods (the range starts mid-day).
    assert len(p95["x"]) == 8 and chart["meta"]["step"] == "day"
    # Beta's 4 admissions (5, 30, 60, 90 min) are in the last 10 hours: at most two days have
    # them, and the newest day's p95 is 90 min unless the 10-hour-old one fell on a day alone.
    values = [value for value in p95["y"] if value is not None]
    assert values and max(values) == 90.0
    assert p95["y"][:6] == [None] * 6
    bad = staff.get("/queue-levels/charts/waits.json?group_by=nope")
    assert bad.status_code == 400 and "group_by" in bad.json()["error"]


def test_the_queue_page_estimates_each_pending_workloads_start(world):
    staff = client_of(world.users["staff"])
    page = staff.get("/queues/test/alpha-cq/?range=7d").content.decode()
    # 12 admissions in 24 h: 0.5 per hour. alpha-first (priority 10) is next: 1 / 0.5 = 2 h;
    # alpha-wait second: 4 h.
    assert 'data-testid="pending-estimate"' in page
    first = page.index("ns-alpha/alpha-first")
    wait = page.index("ns-alpha/alpha-wait")
    assert first < wait
    assert "in 2 h" in page[first:wait]
    assert "in 4 h" in page[wait:]

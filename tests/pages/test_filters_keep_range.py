"""Page forms keep the range the page shows: the chargeback page's Apply (grouping, step) and
the workload list's filters; the chargeback CSV is the report the page shows (same range,
grouping, step, rows and totals). Submitting a form is simulated as a browser does: the form's
inputs, hidden ones included, become the next query."""

from __future__ import annotations

import copy
import csv
import io
import re
from datetime import timedelta
from decimal import Decimal
from html import unescape

import pytest
from django.urls import reverse

from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW
from tests.pages.test_chargeback_page import priced_world

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, priced_world, NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


def form_inputs(html: str, testid: str) -> dict[str, str]:
    """The hidden inputs of the form marked ``data-testid=testid``."""
    match = re.search(rf'<form[^>]*data-testid="{testid}"[^>]*>(.*?)</form>', html, re.S)
    assert match is not None, testid
    return {
        unescape(name): unescape(value)
        for name, value in re.findall(
            r'<input type="hidden" name="([^"]+)" value="([^"]*)">', match.group(1)
        )
    }


def test_chargeback_apply_keeps_the_chosen_range(staff_client, world) -> None:
    url = reverse("dashboard:chargeback")
    shown = staff_client.get(url, {"range": "7d"})
    assert shown.context["time_range"].preset == "7d"

    # The user picks another grouping and presses Apply.
    query = form_inputs(shown.content.decode(), "chargeback-form")
    query.update({"group_by": "namespace", "step": "day"})
    applied = staff_client.get(url, query)

    assert applied.status_code == 200
    assert applied.context["time_range"].preset == "7d"
    report = applied.context["report"]
    assert report.end - report.start == timedelta(days=7)
    assert report.group_by == "namespace"


def test_chargeback_apply_keeps_a_custom_range(staff_client, world) -> None:
    url = reverse("dashboard:chargeback")
    shown = staff_client.get(url, {"start": "2026-08-18T00:00", "end": "2026-08-20T00:00"})
    query = form_inputs(shown.content.decode(), "chargeback-form")
    query["group_by"] = "cluster_queue"
    applied = staff_client.get(url, query)
    report = applied.context["report"]
    assert (report.start.isoformat(), report.end.isoformat()) == (
        "2026-08-18T00:00:00+00:00",
        "2026-08-20T00:00:00+00:00",
    )


def test_the_csv_is_the_report_the_page_shows(staff_client, world) -> None:
    page = staff_client.get(
        reverse("dashboard:chargeback"),
        {"range": "7d", "group_by": "namespace", "step": "day"},
    )
    html = page.content.decode()
    shown_rows = re.findall(r'<tr data-group="([^"]*)" data-cost="([^"]*)"', html)
    download = staff_client.get(page.context["csv_url"])

    assert download.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(download.streaming_content).decode())))
    report = page.context["report"]
    stamp = "%Y%m%dT%H%MZ"
    assert (
        f"chargeback_namespace_{report.start:{stamp}}_{report.end:{stamp}}_day.csv"
        in download["Content-Disposition"]
    )
    # Day periods start at UTC midnights inside the shown range (the first one may be cut).
    first_day = report.start.replace(hour=0)
    days = {f"{first_day + timedelta(days=d):%Y-%m-%dT%H:%M:%SZ}" for d in range(8)}
    periods = {row["period_start"] for row in rows}
    assert periods and periods <= days
    assert max(periods) < f"{report.end:%Y-%m-%dT%H:%M:%SZ}"
    # Every row the page shows, with its cost, is in the CSV, and the totals agree.
    csv_rows = {(row["group"], row["cost_total"]) for row in rows}
    assert {(group, cost.replace(",", "")) for group, cost in shown_rows} <= csv_rows
    assert len(rows) == page.context["page_obj"].paginator.count
    shown_total = Decimal(page.context["totals"]["cost_total"].replace(",", ""))
    assert sum(Decimal(row["cost_total"]) for row in rows) == shown_total


def test_the_workload_filter_keeps_the_chosen_range(staff_client, world) -> None:
    url = reverse("dashboard:workload-list")
    shown = staff_client.get(url, {"range": "7d"})
    query = form_inputs(shown.content.decode(), "workload-filters")
    query.update({"state": "all", "q": "", "sort": "gpu_hours"})
    filtered = staff_client.get(url, query)

    assert filtered.status_code == 200
    assert filtered.context["time_range"].preset == "7d"
    # Clear keeps it too.
    assert 'href="/workloads/?range=7d" data-testid="workload-clear"' in unescape(
        staff_client.get(url, {"range": "7d", "state": "holding"}).content.decode()
    )

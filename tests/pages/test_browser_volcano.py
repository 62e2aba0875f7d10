"""A Volcano cluster's pages in headless Chromium: the Queues list, a queue, its parent queue and a
PodGroup, in Volcano's words, with their charts drawn and nothing logged as an error.

The cluster is the demo's Volcano cluster (``simulate --scheduler volcano``: Volcano Queues and
PodGroups through the product's Volcano translation), one day of hourly windows ending at the
last full hour, so the live server's "now" sees it fresh. Quotas by hand from the scenario
(``tests/demo/test_volcano_demo.py`` works them out): speech deserves 32, capability 56,
guarantee 16; the parent queue research deserves 64 + 56 + 32 = 152.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from core.timewindows import floor_time
from quotas.models import Workload
from tests.pages.test_browser_quotas import chart_info, wait_for_charts

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def volcano_cluster():
    end = floor_time(timezone.now(), 3600)
    call_command(
        "simulate",
        "--days",
        "1",
        "--step",
        "3600",
        "--seed",
        "4",
        "--end",
        end.isoformat(),
        "--cluster",
        "demo-volcano",
        "--scheduler",
        "volcano",
        verbosity=0,
    )
    return "demo-volcano"


def test_a_volcano_clusters_pages_speak_volcano_and_draw_their_charts(
    page, live_server, browser_login, admin_user, volcano_cluster, console_errors
):
    browser_login(page, live_server.url, admin_user)

    page.goto(live_server.url + reverse("dashboard:cluster-queue-list"))
    speech_row = page.locator("[data-testid=queue-table] tr[data-queue=speech]")
    assert "deserved 32 · capability 56" in speech_row.inner_text()
    assert "ClusterQueue" not in page.locator("h1").inner_text()

    url = reverse("dashboard:cluster-queue-detail", args=[volcano_cluster, "speech"])
    page.goto(live_server.url + url)
    assert page.locator("h1").inner_text() == "Queue speech"
    headers = page.locator("[data-testid=quota-table] thead th").all_inner_texts()
    assert [h.lower() for h in headers] == ["resource", "deserved", "capability", "guarantee"]
    cells = page.locator("[data-testid=quota-table] tbody td").all_inner_texts()
    assert cells[1:] == ["32", "56", "16"]
    assert "state" in page.locator("[data-testid=scheduler-fields]").inner_text()
    wait_for_charts(page, 3)
    usage = chart_info(page, "queue-usage-chart")
    assert usage["state"] == "ready" and usage["drawn"] >= 4
    assert usage["title"] == "Queue speech: usage and borrowing"
    # One allocation series: a Volcano queue names no node pool.
    assert [name for name in usage["names"] if name.startswith("Allocated")] == ["Allocated GPUs"]

    url = reverse("dashboard:cohort-detail", args=[volcano_cluster, "research"])
    page.goto(live_server.url + url)
    assert page.locator("h1").inner_text() == "Parent queue research"
    assert page.locator("[data-testid=stat-nominal] .stat-value").inner_text() == "152 GPUs"
    assert page.locator("[data-testid=reclaim-elsewhere]").is_visible()
    members = page.locator("[data-testid=member-table] thead").inner_text()
    assert "QUEUE" in members.upper() and "reclaimWithinCohort" not in members
    wait_for_charts(page, 2)

    ghost = Workload.objects.get(cluster__name=volcano_cluster, name="backfill-embeddings")
    page.goto(live_server.url + reverse("dashboard:workload-detail", args=[ghost.pk]))
    assert "Volcano PodGroup on" in page.locator("body").inner_text()

    assert console_errors == []

"""/workloads/ and the navigation search in headless Chromium, on a ``build_world`` scenario of
its own (a live-server test needs committed rows; ``test_workload_list.py`` shares one world)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from core.ranges import covered_hours
from core.timewindows import floor_time
from dashboard.templatetags.formatting import figure as fmt
from ledger.choices import RateKind, RollupScope
from ledger.models import RateCard
from tests.pages.quota_pages.world import build_world, rollup_sum

H100_PRICE = Decimal("2.50")


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_list_and_search_render_in_chromium(
    page,
    live_server,
    browser_login,
    staff_user,
    cluster,
    lead_user,
    beta_lead,
    console_errors,
    outside_requests,
):
    now = timezone.now()
    world = build_world(cluster, lead_user, beta_lead, now)
    RateCard.objects.create(
        kind=RateKind.ALLOCATED, flavor="h100", price_per_gpu_hour=H100_PRICE,
        effective_from=now.replace(year=2020),
    )  # fmt: skip
    browser_login(page, live_server.url, staff_user)

    page.goto(f"{live_server.url}/workloads/?sort=cost&range=24h")

    table = page.get_by_test_id("workload-list")
    first = table.locator("tbody tr").first
    assert first.get_attribute("data-workload") == f"team-a/{world.wl['a2'].name}"
    # The hours the page's "24h" counted: read the clock after it loaded (the world may have
    # been built in the previous hour).
    loaded = floor_time(timezone.now(), 60)
    span = covered_hours(loaded - timedelta(days=1), loaded)
    gpu_hours = rollup_sum(
        "allocated_gpu_hours", span.starts(), scope=RollupScope.WORKLOAD, workload=world.wl["a2"]
    )
    assert gpu_hours > 0, span
    assert first.get_attribute("data-gpu-hours") == fmt(gpu_hours)
    assert first.get_attribute("data-cost") == f"{Decimal(str(gpu_hours)) * H100_PRICE:,.2f}"
    # The navigation search box finds a GPU by UUID prefix and opens the results.
    page.get_by_test_id("nav-search").fill(world.gpus[0].uuid[:14])
    page.get_by_test_id("nav-search").press("Enter")
    page.wait_for_load_state()
    assert page.get_by_test_id("search-gpus").get_by_text(world.gpus[0].uuid).count() == 1
    assert console_errors == []
    assert outside_requests == []

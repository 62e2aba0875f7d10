"""The chargeback page in headless Chromium, on a ``build_world`` scenario of its own (a
live-server test needs committed rows; ``test_chargeback_page.py`` shares one world)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from ledger.choices import RateKind
from ledger.models import RateCard
from tests.pages.quota_pages.world import build_world

H100_PRICE = Decimal("3.00")


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def finance_user(django_user_model):
    from django.conf import settings
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="money", password="money-password")
    user.groups.add(Group.objects.create(name=settings.GPULEDGER_FINANCE_GROUP))
    return user


def priced_world(cluster, lead_user, beta_lead, now):
    world = build_world(cluster, lead_user, beta_lead, now)
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=H100_PRICE,
        effective_from=now.replace(year=2020),
    )
    return world


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_chargeback_page_in_chromium(
    page, live_server, browser_login, finance_user, cluster, lead_user, beta_lead,
    console_errors, outside_requests,
):  # fmt: skip
    priced_world(cluster, lead_user, beta_lead, timezone.now())
    browser_login(page, live_server.url, finance_user)

    page.goto(f"{live_server.url}/chargeback/?range=7d")

    table = page.get_by_test_id("chargeback-table")
    groups = table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.group)")
    assert groups == ["alpha", "beta"]
    costs = table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.cost)")
    total = page.get_by_test_id("chargeback-totals").get_attribute("data-cost")
    assert sum(Decimal(c.replace(",", "")) for c in costs) == Decimal(total.replace(",", ""))
    api_url = page.get_by_test_id("chargeback-api-url").input_value()
    assert api_url.startswith(live_server.url + "/api/v1/chargeback/?start=")
    page.get_by_test_id("chargeback-copy").click()
    # The clipboard answers asynchronously: wait for the button to say so.
    page.wait_for_function(
        "() => document.querySelector('[data-testid=chargeback-copy]').textContent === 'Copied'",
        timeout=10000,
    )
    with page.expect_download() as download:
        page.get_by_test_id("chargeback-csv").click()
    assert download.value.suggested_filename.startswith("chargeback_team_")
    assert console_errors == []
    assert outside_requests == []

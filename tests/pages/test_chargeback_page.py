"""The chargeback page: the API's report as a table, totals, CSV and API links, the pricing
note, and who sees which teams; figures checked against the ``build_world`` rollups."""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest
from django.urls import reverse

from ledger.choices import RateKind, RollupScope
from ledger.models import HourlyRollup, RateCard
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW, new_world

H100_PRICE = Decimal("3.00")


@pytest.fixture
def finance_user(django_user_model):
    from django.conf import settings
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="money", password="money-password")
    user.groups.add(Group.objects.create(name=settings.GPULEDGER_FINANCE_GROUP))
    return user


def priced_world():
    world = new_world(NOW)
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=H100_PRICE,
        effective_from=NOW.replace(year=2020),
    )
    return world


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, priced_world, NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


@pytest.fixture
def lead_user(world):
    return world.lead


def team_hours(response, team: str) -> float:
    report = response.context["report"]
    return sum(
        HourlyRollup.objects.filter(
            scope=RollupScope.TEAM,
            key=team,
            hour__gte=report.start,
            hour__lt=report.end,
        ).values_list("allocated_gpu_hours", flat=True)
    )


@pytest.mark.django_db
def test_finance_sees_every_team_with_cost_and_totals(login_client, finance_user, world):
    response = login_client(finance_user).get(reverse("dashboard:chargeback"), {"range": "7d"})

    assert response.status_code == 200
    rows = {row["group"]: row for row in response.context["rows"]}
    assert set(rows) == {"alpha", "beta"}
    alpha = team_hours(response, "alpha")
    beta = team_hours(response, "beta")
    assert alpha > 0 and beta > 0
    # alpha's a100 rows have no allocation; its h100 hours are priced at 3.00.
    assert rows["alpha"]["cost_total"] == f"{Decimal(str(alpha)) * H100_PRICE:,.2f}"
    assert rows["beta"]["cost_total"] == f"{Decimal(str(beta)) * H100_PRICE:,.2f}"
    total = (Decimal(str(alpha)) + Decimal(str(beta))) * H100_PRICE
    assert response.context["totals"]["cost_total"] == f"{total:,.2f}"
    assert response.context["pricing"]["complete"] is True
    assert 'data-testid="pricing-note"' not in response.content.decode()


@pytest.mark.django_db
def test_a_lead_sees_only_their_teams(lead_client, world):
    response = lead_client.get(reverse("dashboard:chargeback"), {"range": "7d"})

    assert [row["group"] for row in response.context["rows"]] == ["alpha"]


@pytest.mark.django_db
def test_the_page_links_the_same_report_from_the_api(staff_client, world):
    response = staff_client.get(
        reverse("dashboard:chargeback"), {"range": "7d", "group_by": "namespace", "step": "day"}
    )

    report = response.context["report"]
    api_url = response.context["api_url"]
    assert f"start={report.start:%Y-%m-%dT%H:%M:%SZ}" in api_url
    assert "group_by=namespace" in api_url and "step=day" in api_url
    api = staff_client.get(api_url.replace("http://testserver", "")).json()
    cost = sum(Decimal(str(row["cost"]["total"])) for row in api["rows"])
    assert response.context["totals"]["cost_total"] == f"{cost:,.2f}"
    csv = staff_client.get(response.context["csv_url"])
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")


@pytest.mark.django_db
def test_without_a_rate_card_the_page_says_costs_are_zero_for_a_reason(staff_client, world):
    RateCard.objects.all().delete()

    response = staff_client.get(reverse("dashboard:chargeback"), {"range": "7d"})

    body = response.content.decode()
    assert 'data-testid="pricing-note"' in body
    assert "No rate card in" in body
    assert "unpriced" in body


@pytest.mark.django_db
def test_a_bad_grouping_is_a_400_naming_it(staff_client, world):
    response = staff_client.get(reverse("dashboard:chargeback"), {"group_by": "planet"})

    assert response.status_code == 400
    assert "group_by" in response.content.decode()


@pytest.mark.django_db
def test_every_page_of_a_long_report_shows_the_api_totals_and_its_slice_of_the_rows(
    staff_client, world
):
    """By team and hour over 7 days (2 teams × 168 hours = 336 rows, 7 pages of 50): each
    page's totals are the whole report's, equal to /api/v1/chargeback/ for the same window,
    grouping and step, and to the rollups summed by hand; the pages' rows are the API's rows,
    in its order, each once."""
    params = {"range": "7d", "group_by": "team", "step": "hour"}
    first = staff_client.get(reverse("dashboard:chargeback"), params)
    assert first.status_code == 200
    paginator = first.context["page_obj"].paginator
    assert paginator.count == 2 * 168 and paginator.num_pages == 7

    api = staff_client.get(first.context["api_url"].replace("http://testserver", "")).json()
    assert len(api["rows"]) == paginator.count
    api_cost = sum(Decimal(str(row["cost"]["total"])) for row in api["rows"])
    assert Decimal(str(api["totals"]["cost"]["total"])) == api_cost
    report = first.context["report"]
    allocated = sum(
        HourlyRollup.objects.filter(
            scope=RollupScope.TEAM, hour__gte=report.start, hour__lt=report.end
        ).values_list("allocated_gpu_hours", flat=True)
    )
    assert allocated > 0
    assert api["totals"]["allocated_gpu_hours"] == pytest.approx(allocated)
    # Every allocated hour here is an h100 hour, priced at 3.00.
    assert api_cost == (Decimal(str(allocated)) * H100_PRICE).quantize(Decimal("0.01"))

    shown = []
    for number in range(1, paginator.num_pages + 1):
        page = staff_client.get(reverse("dashboard:chargeback"), {**params, "page": number})
        totals = page.context["totals"]
        assert totals["cost_total"] == f"{api_cost:,.2f}", number
        assert totals["allocated"] == first.context["totals"]["allocated"], number
        html = page.content.decode()
        assert f'data-cost="{api_cost:,.2f}"' in html
        shown.extend((row["group"], row["period"]) for row in page.context["rows"])
    expected = [(row["group"], row["period_start"]) for row in api["rows"]]
    assert [(group, f"{period:%Y-%m-%dT%H:%M:%SZ}") for group, period in shown] == expected

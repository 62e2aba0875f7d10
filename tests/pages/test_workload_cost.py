"""The workload page shows the GPU-hours the workload held and their cost over the range,
priced by the rate cards as the workload list and the chargeback API price them. Expected
values are summed here from the world's workload rollups and its one rate card (h100, 3.00 per
GPU-hour, in force since 2020)."""

from __future__ import annotations

import copy
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW
from tests.pages.test_chargeback_page import H100_PRICE, priced_world

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, priced_world, NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


def _card(html: str, testid: str) -> str:
    match = re.search(
        rf'data-testid="{testid}".*?class="stat-value">\s*([^<\s][^<]*?)\s*<', html, re.S
    )
    assert match is not None, testid
    return match.group(1)


def test_the_workload_page_shows_its_gpu_hours_and_cost(staff_client, world) -> None:
    workload = world.wl["a1"]
    answer = staff_client.get(
        reverse("dashboard:workload-detail", args=[workload.pk]), {"range": "7d"}
    )
    assert answer.status_code == 200
    span = answer.context["time_range"].covered_hours()
    rows = HourlyRollup.objects.filter(
        scope=RollupScope.WORKLOAD, workload=workload, hour__gte=span.first, hour__lt=span.stop
    )
    hours = sum(row.allocated_gpu_hours for row in rows)
    cost = sum(
        Decimal(str(row.allocated_gpu_hours)) * (H100_PRICE if row.flavor == "h100" else 0)
        for row in rows
    )
    assert hours > 0

    html = answer.content.decode()
    assert float(_card(html, "stat-gpu-hours").replace(",", "")) == pytest.approx(hours, abs=0.05)
    assert Decimal(_card(html, "stat-cost").replace(",", "")) == cost.quantize(Decimal("0.01"))

    # The workload list prices it the same.
    listing = staff_client.get(reverse("dashboard:workload-list"), {"range": "7d", "q": "llama"})
    row = re.search(
        rf'data-workload="{workload.namespace}/{workload.name}"[^>]*data-cost="([^"]*)"',
        listing.content.decode(),
    )
    assert row is not None
    assert Decimal(row.group(1).replace(",", "")) == cost.quantize(Decimal("0.01"))

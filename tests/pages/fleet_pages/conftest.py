"""Fixtures of the fleet page tests: ``fleet_data`` built once per test module (``built_once.py``);
the live-server modules keep the per-test ``fleet_data`` of ``tests/pages/conftest.py``.

The fleet's newest window is the one the clock is in when it is built, and its DCGM run ended
seconds before. So the clock is pinned: the fleet is built at the start of the current window
(plus a second), and each test starts at that same instant, the clock running on from there, as
if the fleet had just been built for it. A test that takes longer than the window still crosses
into the next one, as it would have before.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from core.timewindows import floor_time
from fleet.models import Cluster
from tests.pages.built_once import build_once
from tests.pages.conftest import FleetData, build_fleet


def _build() -> FleetData:
    return build_fleet(
        Cluster.objects.create(name="test", display_name="Test cluster"),
        get_user_model().objects.create_user(username="lead", password="lead-password"),
    )


@pytest.fixture(scope="module")
def fleet_instant() -> datetime:
    window = floor_time(timezone.now(), settings.GPULEDGER_COLLECT_SECONDS)
    return window + timedelta(seconds=1)


@pytest.fixture(scope="module")
def module_fleet(
    django_db_setup: Any, django_db_blocker: Any, fleet_instant: datetime
) -> Iterator[FleetData]:
    yield from build_once(django_db_blocker, _build, fleet_instant)


@pytest.fixture
def fleet_data(module_fleet: FleetData, db: None, fleet_instant: datetime) -> Iterator[FleetData]:
    with time_machine.travel(fleet_instant, tick=True):
        yield copy.deepcopy(module_fleet)


@pytest.fixture
def cluster(fleet_data: FleetData) -> Any:
    return fleet_data.cluster


@pytest.fixture
def lead_user(fleet_data: FleetData) -> Any:
    return fleet_data.lead

"""Fixtures of the quota page tests: one Kueue scenario (``world.build_world``) per test module,
built once and copied for each test (``tests/pages/built_once.py``)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import time_machine

from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW, World, new_world


@pytest.fixture(scope="module")
def module_world(django_db_setup: Any, django_db_blocker: Any) -> Iterator[World]:
    yield from build_once(django_db_blocker, lambda: new_world(NOW), NOW, tick=True)


@pytest.fixture
def frozen() -> Iterator[Any]:
    with time_machine.travel(NOW, tick=True):
        yield NOW


@pytest.fixture
def world(module_world: World, db: None, frozen: Any) -> World:
    return copy.deepcopy(module_world)


@pytest.fixture
def cluster(world: World) -> Any:
    return world.cluster


@pytest.fixture
def lead_user(world: World) -> Any:
    return world.lead


@pytest.fixture
def beta_lead(world: World) -> Any:
    return world.beta_lead


@pytest.fixture
def beta_client(login_client: Any, beta_lead: Any) -> Any:
    return login_client(beta_lead)

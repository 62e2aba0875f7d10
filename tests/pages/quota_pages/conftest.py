"""Fixtures of the quota page tests: one Kueue scenario (``world.build_world``) per test module.

The scenario is written once per module, inside a transaction rolled back when the module ends.
Each test runs in its own savepoint (pytest-django's ``db``), rolled back after it, and gets its
own copy of the ``World`` objects: what a test changes, in the database or on those objects, no
other test sees. Live-server tests need committed rows, so they cannot run inside that
transaction: they live in the browser modules, with their own data.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import transaction

from fleet.models import Cluster
from tests.pages.quota_pages.world import NOW, World, build_world


@pytest.fixture(scope="module")
def module_world(django_db_setup: Any, django_db_blocker: Any) -> Iterator[World]:
    with django_db_blocker.unblock(), transaction.atomic():
        with time_machine.travel(NOW, tick=True):
            users = get_user_model().objects
            built = build_world(
                Cluster.objects.create(name="test", display_name="Test cluster"),
                users.create_user(username="lead", password="lead-password"),
                users.create_user(username="beta-lead", password="beta-password"),
                NOW,
            )
        try:
            yield built
        finally:
            transaction.set_rollback(True)


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

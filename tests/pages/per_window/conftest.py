"""The pruned world (``tests/pages/pruned_world.py``) built once per module (``built_once.py``)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.pages.built_once import build_once
from tests.pages.pruned_world import END, PrunedWorld, build_pruned_world


@pytest.fixture(scope="module")
def module_world(django_db_setup: Any, django_db_blocker: Any) -> Iterator[PrunedWorld]:
    yield from build_once(django_db_blocker, build_pruned_world, END + timedelta(hours=2))


@pytest.fixture
def world(module_world: PrunedWorld, db: None, settings: Any) -> PrunedWorld:
    settings.GPULEDGER_USAGE_RETENTION_DAYS = 1
    return copy.deepcopy(module_world)

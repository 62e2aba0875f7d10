"""Fixtures shared by every test folder."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def cluster(db):
    from fleet.models import Cluster

    return Cluster.objects.create(name="test", display_name="Test cluster")


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache: no chargeback report built by another test's data
    (tests write rollups directly, not through the rollup that versions them) is found."""
    from django.core.cache import cache

    cache.clear()
    yield

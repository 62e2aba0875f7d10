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

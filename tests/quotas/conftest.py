"""The recorded Kueue fleet's figures, and names the quota tests give the shared fixtures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kube_api_server import FakeKubeAPI
from tests.kueue_fixtures import FIXTURES


@pytest.fixture
def expected() -> dict[str, Any]:
    """The fixture README's figures, machine-readable."""
    return json.loads((FIXTURES / "expected.json").read_text())


@pytest.fixture
def kube_api(kube: FakeKubeAPI) -> FakeKubeAPI:
    """The recorded fleet on a Kueue v1beta2 API server (``kube`` in tests/conftest.py)."""
    return kube


@pytest.fixture
def kube_cluster(db: None) -> Any:
    from fleet.models import Cluster

    return Cluster.objects.create(name="gpu-east", display_name="GPU east")

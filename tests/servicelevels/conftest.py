"""Fixtures of the service-level tests: the recorded fleet on the Kubernetes API test server,
and the notification tests' loopback webhook server for the ``queue_slo_breached`` route test."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import Cluster
from tests.kube_api_server import FakeKubeAPI
from tests.notifications.conftest import loopback_receivers, webhook_server

__all__ = ["loopback_receivers", "webhook_server"]


@pytest.fixture
def kube_api(kube: FakeKubeAPI) -> FakeKubeAPI:
    """The recorded fleet on a Kueue v1beta2 API server (``kube`` in tests/conftest.py)."""
    return kube


@pytest.fixture
def kube_cluster(db: None) -> Any:
    return Cluster.objects.create(name="gpu-east", display_name="GPU east")

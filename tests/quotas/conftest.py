"""A loopback Kubernetes API server serving tests/fixtures/kueue, and a kubeconfig for it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube_api_server import FIXTURES, FakeKubeAPI, load_fixtures


@pytest.fixture
def expected() -> dict[str, Any]:
    """The fixture README's figures, machine-readable."""
    return json.loads((FIXTURES / "expected.json").read_text())


@pytest.fixture
def make_kube_api(tmp_path: Path, settings: Any) -> Iterator[Callable[..., FakeKubeAPI]]:
    """Start API servers; the newest one is what settings.KUBECONFIG points at."""
    servers: list[FakeKubeAPI] = []
    settings.GPULEDGER_KUBE_CONTEXT = ""

    def make(version: str = "v1beta2", *, load: bool = True, **kwargs: Any) -> FakeKubeAPI:
        kwargs.setdefault("kueue_versions", (version,))
        api = FakeKubeAPI(**kwargs).start()
        servers.append(api)
        if load:
            load_fixtures(api, version)
        path = api.write_kubeconfig(tmp_path / f"kubeconfig-{len(servers)}")
        settings.KUBECONFIG = str(path)
        api.kubeconfig = path  # type: ignore[attr-defined]
        return api

    yield make
    for api in servers:
        api.stop()


@pytest.fixture
def kube_api(make_kube_api: Callable[..., FakeKubeAPI]) -> FakeKubeAPI:
    """The fixture fleet on a Kueue v1beta2 API server (no visibility API)."""
    return make_kube_api()


@pytest.fixture
def kube_cluster(db: None) -> Any:
    from fleet.models import Cluster

    return Cluster.objects.create(name="gpu-east", display_name="GPU east")

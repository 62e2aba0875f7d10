"""Fixtures shared by every test folder, the ``postgresql`` marker, and no skipped integration
test under CI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube_api_server import FakeKubeAPI
from tests.kueue_fixtures import load_fixtures
from tests.prometheus_server import in_ci

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.postgresql(reason=...)``: the test asserts what only PostgreSQL does (a
    storage parameter, a statement SQLite cannot run); elsewhere it skips, saying why."""
    from django.db import connection

    for item in items:
        marker = item.get_closest_marker("postgresql")
        if marker is None:
            continue
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        if not reason:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.postgresql needs a reason")
        if connection.vendor != "postgresql":
            item.add_marker(
                pytest.mark.skip(reason=f"needs PostgreSQL ({connection.vendor} here): {reason}")
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """With CI set, an integration or browser test that skips fails instead: CI runs them all
    (only the ``postgresql`` marker's skips on other databases are expected)."""
    report = yield
    expected = item.get_closest_marker("postgresql") or hasattr(report, "wasxfail")
    needs_tools = item.get_closest_marker("integration") or item.get_closest_marker("browser")
    if report.skipped and needs_tools and not expected and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where integration tests must run: {reason}"
    return report


@pytest.fixture(scope="session", autouse=True)
def _live_server_without_nagle() -> None:
    """Django's live server (the browser tests' pages, a real Prometheus's scrapes) answers a
    kept-alive connection in two sends, headers then body: with Nagle's algorithm the body waited
    for the client's delayed ACK, about 40 ms an answer (as tests/http_serving.py says)."""
    from django.test.testcases import QuietWSGIRequestHandler

    QuietWSGIRequestHandler.disable_nagle_algorithm = True


@pytest.fixture(scope="session", autouse=True)
def _flush_only_written_tables() -> Iterator[None]:
    """After a transactional test, delete the rows it left instead of truncating every table
    (``tests.databases.empty_written_tables``)."""
    from django.test import TransactionTestCase

    from tests.databases import DJANGO_FIXTURE_TEARDOWN, flush_only_written_tables

    TransactionTestCase._fixture_teardown = flush_only_written_tables  # type: ignore[attr-defined]
    yield
    TransactionTestCase._fixture_teardown = DJANGO_FIXTURE_TEARDOWN  # type: ignore[attr-defined]


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


# --- the Kubernetes API server ----------------------------------------------------------------


@pytest.fixture
def make_kube_api(tmp_path: Path, settings: Any) -> Iterator[Callable[..., FakeKubeAPI]]:
    """Start loopback Kubernetes API servers (``tests.kube_api_server``), each serving the
    recorded fleet unless ``load=False``; the settings point at the newest one, whose kubeconfig
    is ``api.kubeconfig``. All stop when the test ends."""
    servers: list[FakeKubeAPI] = []
    settings.GPULEDGER_KUBE_CONTEXT = ""

    def make(version: str = "v1beta2", *, load: bool = True, **kwargs: Any) -> FakeKubeAPI:
        kwargs.setdefault("kueue_versions", (version,))
        api = FakeKubeAPI(**kwargs).start()
        servers.append(api)
        if load:
            load_fixtures(api, version)
        settings.KUBECONFIG = str(api.write_kubeconfig(tmp_path / f"kubeconfig-{len(servers)}"))
        return api

    yield make
    for api in servers:
        api.stop()


@pytest.fixture
def kube(make_kube_api: Callable[..., FakeKubeAPI]) -> FakeKubeAPI:
    """The recorded fleet (tests/fixtures/kueue) on a Kueue v1beta2 API server, no visibility
    API; the settings point at it."""
    return make_kube_api()


@pytest.fixture
def gpu_east(kube: FakeKubeAPI, db: None) -> Any:
    """Cluster gpu-east, quota write-back on, synced once from ``kube``."""
    from fleet.models import Cluster
    from quotas.sync import sync_cluster

    cluster = Cluster.objects.create(name="gpu-east", quota_write_enabled=True)
    run = sync_cluster(cluster.pk)
    assert run.status == "success", run.error
    return cluster

"""A single-cluster install is described by the environment alone."""

import pytest

from fleet.models import Cluster


@pytest.mark.django_db
def test_nothing_is_created_without_prometheus_or_kubeconfig(settings):
    settings.PROMETHEUS_URL = ""
    settings.KUBECONFIG = ""

    assert Cluster.objects.ensure_from_settings() is None
    assert not Cluster.objects.exists()


@pytest.mark.django_db
def test_the_default_cluster_is_created_from_the_environment(settings):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9090"
    settings.KUBECONFIG = ""
    settings.GPULEDGER_CLUSTER_NAME = "prod"
    settings.GPULEDGER_KUBE_CONTEXT = "prod-admin"

    cluster = Cluster.objects.ensure_from_settings()

    assert cluster is not None
    assert (cluster.name, cluster.prometheus_url, cluster.kube_context) == (
        "prod",
        "http://127.0.0.1:9090",
        "prod-admin",
    )
    assert cluster.collect_enabled and not cluster.sync_enabled


@pytest.mark.django_db
def test_admin_edits_win_over_the_environment(settings):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9090"
    settings.GPULEDGER_CLUSTER_NAME = "prod"
    Cluster.objects.create(name="prod", prometheus_url="http://127.0.0.2:9090")

    cluster = Cluster.objects.ensure_from_settings()

    assert cluster.prometheus_url == "http://127.0.0.2:9090"
    assert Cluster.objects.count() == 1


@pytest.mark.django_db
def test_the_collect_fan_out_creates_the_default_cluster(settings, monkeypatch):
    from ledger import tasks

    settings.PROMETHEUS_URL = "http://127.0.0.1:9090"
    settings.GPULEDGER_CLUSTER_NAME = "prod"
    sent = []
    monkeypatch.setattr(tasks.collect_metrics, "apply_async", lambda args, **kw: sent.append(args))

    tasks.collect_metrics_all()

    assert sent == [[Cluster.objects.get(name="prod").pk]]

"""GPULEDGER_KUBE_IN_CLUSTER: the deployment's cluster reads the API with the pod's service
account, with no kubeconfig and no admin step."""

from __future__ import annotations

import pytest

from fleet.models import Cluster
from quotas.kueue import KubeError, KueueClient

pytestmark = pytest.mark.django_db


def test_the_cluster_created_on_first_use_is_read_in_cluster(settings) -> None:
    settings.GPULEDGER_KUBE_IN_CLUSTER = True
    settings.KUBECONFIG = ""
    settings.PROMETHEUS_URL = "http://127.0.0.1:9090"
    settings.GPULEDGER_CLUSTER_NAME = "default"

    cluster = Cluster.objects.ensure_from_settings()

    assert cluster is not None
    assert (cluster.name, cluster.kube_in_cluster, cluster.sync_enabled) == ("default", True, True)
    assert cluster.collect_enabled


def test_in_cluster_alone_describes_a_sync_only_install(settings) -> None:
    settings.GPULEDGER_KUBE_IN_CLUSTER = True
    settings.KUBECONFIG = ""
    settings.PROMETHEUS_URL = ""

    cluster = Cluster.objects.ensure_from_settings()

    assert cluster is not None
    assert (cluster.kube_in_cluster, cluster.sync_enabled, cluster.collect_enabled) == (
        True,
        True,
        False,
    )


def test_off_the_kubeconfig_is_used_as_before(settings, tmp_path) -> None:
    settings.GPULEDGER_KUBE_IN_CLUSTER = False
    settings.KUBECONFIG = str(tmp_path / "config")
    settings.PROMETHEUS_URL = ""

    cluster = Cluster.objects.ensure_from_settings()

    assert cluster is not None
    assert (cluster.kube_in_cluster, cluster.sync_enabled) == (False, True)


def test_outside_a_pod_the_in_cluster_client_says_why_it_cannot_start(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    cluster = Cluster.objects.create(name="default", kube_in_cluster=True)

    with pytest.raises(KubeError, match="in-cluster service account") as caught:
        KueueClient.for_cluster(cluster)

    assert caught.value.permanent

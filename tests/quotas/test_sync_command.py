"""quotas.sync from the outside: the ``sync_cluster`` command and the Celery tasks."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from fleet.choices import IngestStatus
from fleet.models import Cluster, IngestRun
from quotas.models import Workload

pytestmark = pytest.mark.django_db


# --- the command and the tasks ---------------------------------------------------------------


def test_the_command_creates_the_cluster_and_syncs_it(kube_api, capsys) -> None:
    call_command(
        "sync_cluster", "--cluster", "gpu-west", "--create", "--kubeconfig", kube_api.kubeconfig
    )

    cluster = Cluster.objects.get(name="gpu-west")
    assert Workload.objects.filter(cluster=cluster).count() == 16
    assert "gpu-west: success" in capsys.readouterr().out


def test_the_command_syncs_the_cluster_the_environment_describes(kube_api, settings) -> None:
    # given: only KUBECONFIG describes the install (no cluster row, no --cluster)
    settings.KUBECONFIG = kube_api.kubeconfig
    settings.PROMETHEUS_URL = ""
    settings.GPULEDGER_CLUSTER_NAME = "onprem"

    call_command("sync_cluster", "--kubeconfig", kube_api.kubeconfig)

    cluster = Cluster.objects.get()
    assert cluster.name == "onprem"
    assert Workload.objects.filter(cluster=cluster).count() == 16


def test_the_command_needs_a_cluster_name_when_there_are_several(kube_cluster, settings) -> None:
    settings.KUBECONFIG = ""
    settings.PROMETHEUS_URL = ""
    Cluster.objects.create(name="gpu-west")

    with pytest.raises(CommandError, match="several clusters .*name one with --cluster"):
        call_command("sync_cluster")


def test_the_command_refuses_an_unknown_cluster_without_create(kube_api) -> None:
    with pytest.raises(CommandError, match="no cluster named"):
        call_command("sync_cluster", "--cluster", "nowhere")


def test_the_command_fails_on_a_permanent_error(kube_api, kube_cluster) -> None:
    kube_api.token = "rotated"

    with pytest.raises(CommandError, match="permanent"):
        call_command("sync_cluster", "--cluster", kube_cluster.name)


def test_sync_clusters_all_fans_out_to_enabled_clusters(kube_cluster, monkeypatch) -> None:
    from quotas import tasks

    Cluster.objects.create(name="paused", sync_enabled=False)
    sent = []
    monkeypatch.setattr(
        tasks.sync_cluster_task, "apply_async", lambda args, **kw: sent.append((args, kw))
    )

    assert tasks.sync_clusters_all() == 1
    assert sent[0][0] == [kube_cluster.pk]
    assert sent[0][1]["expires"] > 0


def test_the_task_retries_transient_errors_only(kube_api, kube_cluster, settings) -> None:
    from celery.exceptions import Retry

    from quotas import tasks

    settings.GPULEDGER_SYNC_SECONDS = 5  # a short watch: 5 s minus the margin
    settings.GPULEDGER_RELIST_SECONDS = 5
    kube_api.fail(lambda method, path, query: True, 503, times=1000)

    with pytest.raises(Retry):
        tasks.sync_cluster_task.apply(args=[kube_cluster.pk], throw=True)

    kube_api.clear_failures()
    kube_api.token = "rotated"
    result = tasks.sync_cluster_task.apply(args=[kube_cluster.pk], throw=True)
    assert result.successful()
    assert IngestRun.objects.filter(status=IngestStatus.FAILED).count() == 2


@pytest.mark.parametrize(
    ("relist", "interval", "expected"),
    [(300, 30, 297), (100, 30, 87), (5, 5, 2), (10, 30, 27)],
)
def test_the_watch_lasts_until_the_tick_before_the_next_relist(
    settings, relist, interval, expected
) -> None:
    from quotas.tasks import watch_window_seconds

    settings.GPULEDGER_RELIST_SECONDS = relist
    settings.GPULEDGER_SYNC_SECONDS = interval

    assert watch_window_seconds() == expected

"""A cluster may only name GPULEDGER_SECRET_* variables as its Prometheus secret."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from fleet.choices import PrometheusAuth
from fleet.models import Cluster
from fleet.prometheus import PrometheusClient, PrometheusError


@pytest.mark.parametrize(
    "name", ["SECRET_KEY", "DATABASE_URL", "gpuledger_secret_x", "GPULEDGER_SECRET_"]
)
@pytest.mark.django_db
def test_the_model_refuses_names_outside_the_prefix(name):
    cluster = Cluster(name="c", prometheus_url="http://127.0.0.1:9", prometheus_secret_env=name)

    with pytest.raises(ValidationError) as failure:
        cluster.full_clean()

    assert "prometheus_secret_env" in failure.value.message_dict


@pytest.mark.django_db
def test_the_admin_refuses_them_too(client):
    admin = User.objects.create_superuser("root", password="pw-root-0123456789")
    client.force_login(admin)

    response = client.post(
        "/admin/fleet/cluster/add/",
        {
            "name": "stolen",
            "prometheus_url": "http://127.0.0.1:9",
            "prometheus_auth": PrometheusAuth.BEARER,
            "prometheus_secret_env": "SECRET_KEY",
            "prometheus_timeout_seconds": 30,
            "pod_label_style": "auto",
            "prometheus_headers": "{}",
            "prometheus_verify_tls": "on",
            "collect_enabled": "on",
            "sync_enabled": "on",
        },
    )

    assert response.status_code == 200
    assert "starts with GPULEDGER_SECRET_" in response.content.decode()
    assert not Cluster.objects.filter(name="stolen").exists()


@pytest.mark.django_db
def test_a_row_saved_before_the_rule_is_refused_at_run_time_without_reading_the_variable(
    monkeypatch,
):
    monkeypatch.setenv("SECRET_KEY_FOR_TEST", "must-never-leave")
    cluster = Cluster.objects.create(
        name="legacy",
        prometheus_url="http://127.0.0.1:9",
        prometheus_auth=PrometheusAuth.BEARER,
        prometheus_secret_env="SECRET_KEY_FOR_TEST",  # create() skips validation, like old rows
    )

    with pytest.raises(PrometheusError, match="does not start with GPULEDGER_SECRET_") as failure:
        PrometheusClient.for_cluster(cluster)

    assert failure.value.permanent
    assert "must-never-leave" not in str(failure.value)

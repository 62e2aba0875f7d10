"""QueueSLO in the Django admin: listed with its last judged day, added through the form."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from servicelevels.models import QueueSLO
from tests.servicelevels.helpers import admitted, queue

pytestmark = pytest.mark.django_db


def test_an_admin_sets_an_objective_and_sees_its_last_judged_day(cluster, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(root)
    cq = queue(cluster)
    response = client.post(
        "/admin/servicelevels/queueslo/add/",
        {
            "cluster_queue": cq.pk,
            "statistic": "p95",
            "max_wait_seconds": 1800,
            "min_admissions": 1,
            "enabled": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    slo = QueueSLO.objects.get()
    assert (slo.cluster_queue, slo.max_wait_seconds) == (cq, 1800)
    # Yesterday: one admission after 40 min, over the 30-minute objective.
    yesterday = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(
        days=1
    )
    admitted(cq, "w1", yesterday, timedelta(minutes=40))
    listing = client.get("/admin/servicelevels/queueslo/").content.decode()
    assert f"{yesterday:%Y-%m-%d}: breached" in listing

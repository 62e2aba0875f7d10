"""A ``serving_overprovisioned`` episode on the Alerts pages, its evidence chart and the API: the
deployment is named (namespace/kind/name), its knee and days are shown."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from alerts.choices import Rule
from alerts.models import Episode, Exemption
from alerts.overprovisioned import evaluate_serving
from tests.alerts.serving_days import HOUR, write_day
from tests.alerts.test_overprovisioned import chat, day

__all__ = ["chat"]

NAME = "ml-serving/Deployment/chat"


@pytest.fixture
def episode(chat) -> Episode:
    for n in (1, 2, 3):
        write_day(chat, day(n), per_replica=150.0)
    write_day(chat, day(4), per_replica=900.0)
    evaluate_serving(day(5) + 2 * HOUR)
    return Episode.objects.get(rule=Rule.SERVING_OVERPROVISIONED)


@pytest.fixture
def staff(django_user_model) -> Client:
    user = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="exempt_episode"))
    client = Client()
    client.force_login(user)
    return client


def test_the_alert_list_names_the_deployment(episode, staff):
    page = staff.get("/alerts/?start=2026-11-01T00:00:00Z&end=2026-11-08T00:00:00Z&state=all")
    text = page.content.decode()
    assert page.status_code == 200
    assert f"serving {NAME}</a>" in text
    assert "Serving over-provisioned" in text


def test_the_episode_page_shows_the_knee_and_the_days(episode, staff):
    page = staff.get(f"/alerts/{episode.pk}/")
    text = page.content.decode()
    assert page.status_code == 200
    serving = f"/serving/{episode.serving_workload_id}/"
    assert f'<a data-testid="serving-workload" href="{serving}">{NAME}</a>' in text
    assert "Knee: 1,000 output tokens/s per replica" in text
    # Days 1-3 below (24 of 24 hours each), day 4 at 900 per replica ended it.
    assert "Below 50.0 % of the knee in 72 of 72 judged hours (100.0 %) on 3 days" in text
    assert "288 GPU-hours held, 216 of them on replicas" in text
    assert text.count('<td class="nowrap">below half the knee</td>') == 3
    assert text.count('<td class="nowrap">not below</td>') == 1
    assert "in the hour from 2026-11-02 00:00 UTC" in text
    assert "Exempt this serving deployment because" in text


def test_the_evidence_chart_draws_the_throughput_per_replica_against_the_knee(episode, staff):
    chart = staff.get(f"/alerts/{episode.pk}/charts/evidence.json").json()
    [trace] = chart["data"]
    values = [v for v in trace["y"] if v is not None]
    # A day either side of days 1-4: day 0 at the knee, days 1-3 at 150, day 4 at 900.
    assert values == [1000.0] * 24 + [150.0] * 72 + [900.0] * 24
    levels = sorted(s["y0"] for s in chart["layout"]["shapes"] if s["type"] == "line")
    assert levels == [500.0, 1000.0]


def test_the_api_gives_the_deployment_and_its_evidence(episode, staff):
    [row] = staff.get("/api/v1/alerts/?rule=serving_overprovisioned").json()["results"]
    assert row["serving_workload"] == NAME
    assert row["workload"] is None
    evidence = row["serving_evidence"]
    assert evidence["knee_per_replica"] == 1000.0
    assert evidence["knee_unit"] == "output_tokens_per_second"
    assert (evidence["below_hours"], evidence["judged_hours"]) == (72, 72)
    assert [d["status"] for d in evidence["days"]] == ["below_knee"] * 3 + ["at_knee"]


def test_exempting_from_the_page_exempts_the_deployment(episode, staff, chat):
    response = staff.post(f"/alerts/{episode.pk}/exempt/", {"comment": "launch reserve"})
    assert response.status_code == 302
    exemption = Exemption.objects.get()
    assert exemption.serving_workload == chat and exemption.kind == "serving_workload"

"""An open idle episode and its workload's page count the same hours: those that have ended.

Hand-worked: team red's ``idle`` workload holds 2 h100 GPUs, idle (SM_ACTIVE 0.002) from 08:00
to 09:30, evaluated window by window; the clock reads 09:35. The hour 08:00-09:00 has ended,
09:00-10:00 is in progress. Over the ended hours: 2 GPUs × 1 h = 2.0 wasted GPU-hours, priced
2 × 2.50 = 5.00 by the h100 rate card. The episode's stored totals (3.0 GPU-h, 7.50) include
the half hour in progress, which the pages leave out until it ends.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from alerts.choices import Rule
from alerts.ended import through_ended_hours
from ledger.rollup import roll_up_hour
from tests.alerts.conftest import PRICE, T0, World, at

pytestmark = pytest.mark.django_db

IDLE = 0.002
GPUS = 2
ENDED_IDLE = GPUS * 1.0  # 08:00-09:00
ENDED_COST = Decimal(GPUS) * PRICE


def _number(text: str) -> float:
    return float(str(text).replace(",", "").split()[0])


@pytest.fixture
def idle_world(world: World, time_machine) -> World:
    gang = world.gang(world.workload("idle", GPUS))
    world.run(gang, range(90), lambda minute, gpu: IDLE)
    world.evaluate_live(0, 90)
    for hour in (T0, at(60)):
        roll_up_hour(world.cluster.pk, hour)
    time_machine.move_to(at(95), tick=False)
    return world


@pytest.fixture
def client(django_user_model) -> Client:
    user = django_user_model.objects.create_user(username="finance", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def test_the_episode_states_the_ended_hours_only(idle_world: World) -> None:
    (episode,) = idle_world.episodes(Rule.IDLE_WORKLOAD)
    assert episode.resolved_at is None
    # The stored totals run through the newest window, in the hour in progress.
    assert episode.idle_gpu_hours == pytest.approx(GPUS * 1.5)
    ended = through_ended_hours(episode, at(95))
    assert ended.cut and ended.through == at(60)
    assert ended.idle_gpu_hours == pytest.approx(ENDED_IDLE)
    assert ended.cost == ENDED_COST
    # Once the hour has ended, the whole episode counts.
    later = through_ended_hours(episode, at(125))
    assert not later.cut and later.idle_gpu_hours == pytest.approx(GPUS * 1.5)
    assert later.cost == Decimal(GPUS) * Decimal("1.5") * PRICE


def test_episode_page_and_workload_page_say_the_same(idle_world: World, client: Client) -> None:
    (episode,) = idle_world.episodes(Rule.IDLE_WORKLOAD)
    alert = client.get(reverse("dashboard:episode-detail", args=[episode.pk]))
    workload = client.get(reverse("dashboard:workload-detail", args=[episode.workload_id]))
    assert alert.status_code == workload.status_code == 200
    alert_cards = {card["testid"]: card for card in alert.context["stats"]}
    page_cards = {card["testid"]: card for card in workload.context["stats"]}
    assert _number(alert_cards["stat-idle"]["value"]) == pytest.approx(ENDED_IDLE)
    assert _number(page_cards["stat-idle"]["note"]) == pytest.approx(ENDED_IDLE)
    assert _number(alert_cards["stat-cost"]["value"]) == float(ENDED_COST)
    assert _number(page_cards["stat-cost"]["value"]) == float(ENDED_COST)
    assert "through 2026-04-06 09:00 UTC" in alert_cards["stat-cost"]["note"]

    listed = client.get(reverse("alert-list")).json()
    row = next(item for item in listed["results"] if item["id"] == episode.pk)
    assert row["ended_idle_gpu_hours"] == pytest.approx(ENDED_IDLE)
    assert Decimal(row["ended_cost"]) == ENDED_COST

"""What a first visit gets right: a finished workload says what it held (not "0 GPUs held"), and
a pending one where it stands. The user menu is in ``test_user_menu.py``, Chromium in
``test_browser_first_visit.py``."""

from __future__ import annotations

import copy
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.urls import reverse

from dashboard.views.workloads import peak_gpus
from quotas.choices import WorkloadState
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import (
    NOW,
    finished_with_pods,
    held_by_running_pods,
    new_world,
)


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, lambda: new_world(NOW), NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


@pytest.fixture
def lead_user(world):
    return world.lead


@pytest.fixture
def cluster(world):
    return world.cluster


# --- A finished workload's GPUs -------------------------------------------------------------


def pod(start_hours: float, end_hours: float | None, gpus: float) -> SimpleNamespace:
    return SimpleNamespace(
        started_at=NOW - timedelta(hours=start_hours),
        ended_at=None if end_hours is None else NOW - timedelta(hours=end_hours),
        gpus=gpus,
    )


def test_the_peak_counts_pods_that_overlap():
    assert peak_gpus([pod(10, 5, 4), pod(8, 2, 4), pod(3, 1, 2)]) == 8


def test_a_pod_that_ends_as_another_starts_hands_its_gpus_over():
    # A gang re-admitted on the minute its old pods ended held 8, never 16.
    assert peak_gpus([pod(10, 5, 8), pod(5, 1, 8)]) == 8


def test_pods_still_running_hold_until_now():
    assert peak_gpus([pod(10, None, 4), pod(9, 8, 2), pod(1, None, 4)]) == 8
    assert peak_gpus([]) == 0


@pytest.mark.django_db
def test_a_finished_workload_shows_the_gpus_it_held_at_its_peak(lead_client, world, cluster):
    a4 = finished_with_pods(world, cluster)

    response = lead_client.get(reverse("dashboard:workload-detail", args=[a4.pk]))

    card = {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]
    assert card["label"] == "GPUs at peak"
    assert card["value"] == "8"
    assert card["note"] == (
        "held at once by its pods while it ran; holds none now; requested 8, h100"
    )


@pytest.mark.django_db
def test_a_finished_workload_no_pod_was_seen_for_says_so(lead_client, world):
    a4 = world.wl["a4"]

    response = lead_client.get(reverse("dashboard:workload-detail", args=[a4.pk]))

    card = {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]
    assert (card["label"], card["value"]) == ("GPUs at peak", "0")
    assert card["note"].startswith("no pod of it was seen holding GPUs; requested 8")


@pytest.mark.django_db
def test_running_and_waiting_workloads_still_show_what_they_hold_now(lead_client, world):
    # Held: by running pods in the newest window (a1 is admitted 8, its pods hold fewer).
    for key, held in (("a1", held_by_running_pods(world.wl["a1"])), ("a3", 0.0)):
        response = lead_client.get(reverse("dashboard:workload-detail", args=[world.wl[key].pk]))
        card = {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]
        assert (card["label"], card["value"]) == ("GPUs held", f"{held:g}")
    assert world.wl["a1"].state == WorkloadState.ADMITTED

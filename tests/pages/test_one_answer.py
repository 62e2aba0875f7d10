"""One answer everywhere: every figure that appears in two places agrees, on the simulated fleet.

The world is the demo's (``manage.py simulate``, one day at 30-minute windows, through the real
ingest path): MIG instances, a time-sliced GPU, A100 nodes that export only GR_ENGINE_ACTIVE,
workloads pending for a100 in a queue whose first flavor is h100, borrowing in the research
cohort and an idle notebook. Every page and API is read for one range (the last 24 hours).

The comparisons live in ``tests/pages/one_answer_comparisons.py`` (``@compares("what")``: per
subject, the ``(where, value)`` pairs that must all be equal);
``test_every_figure_agrees_where_it_appears_twice`` runs each. Those tests only read: they share
one ``Reads`` for the module, so every page and API is requested once.

Each comparison must be able to fail: ``PERTURBED`` names, for each, a function that ONE of its
places calls, and ``test_each_comparison_fails_when_one_place_is_wrong`` patches that name in
that one module (its numbers made larger, its sentence reworded) and expects a disagreement.
A contradiction found and not yet fixed is listed in ``KNOWN``: strict xfail, so its fix shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from tests.pages.built_once import build_once
from tests.pages.one_answer_comparisons import COMPARISONS
from tests.pages.one_answer_reads import (
    END,
    NOW,
    Reads,
    agrees,
    hotter,
    inflate,
    misprinted,
    reworded,
    total_inflated,
)


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[Client]:
    """The simulated fleet, and a client signed in as staff for the module (its session is one
    of the world's rows)."""

    def build() -> Client:
        call_command(
            "simulate",
            "--days",
            "1",
            "--step",
            "1800",
            "--seed",
            "42",
            "--end",
            END.isoformat(),
        )
        client = Client()
        client.force_login(get_user_model().objects.create_user(username="staff", is_staff=True))
        return client

    yield from build_once(django_db_blocker, build, NOW)


@pytest.fixture
def at_now(world, db, time_machine) -> None:
    time_machine.move_to(NOW, tick=False)


@pytest.fixture(scope="module")
def read_once(world) -> Reads:
    return Reads(world)


@pytest.fixture
def shared_reads(read_once, at_now) -> Reads:
    """The pages and APIs read once for the tests that only read them (each page's answer is the
    same in every test: the same rows, the same clock)."""
    return read_once


@pytest.fixture
def reads(world, at_now) -> Reads:
    """Pages and APIs read again, for a test that changes what one of them calls."""
    return Reads(world)


# Contradictions found and not yet fixed: each must still fail (strict), so fixing it shows.
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize(
    "what",
    [
        pytest.param(what, marks=pytest.mark.xfail(strict=True, reason=KNOWN[what]))
        if what in KNOWN
        else what
        for what in sorted(COMPARISONS)
    ],
)
def test_every_figure_agrees_where_it_appears_twice(shared_reads, what):
    for subject, pairs in COMPARISONS[what](shared_reads).items():
        assert len(pairs) >= 2, f"{what}: a comparison needs two places"
        first_where, first = pairs[0]
        for where, value in pairs[1:]:
            assert agrees(first, value), (
                f"{what}, {subject}: {first_where} says {first}, {where} says {value}"
            )


# Comparison → (module, function the page or API of ONE of its places calls, how it goes wrong).
# Patching the name inside that one module leaves every other place as it is.
PERTURBED: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    **{
        what: ("ledger.chargeback", "row_dict", inflate)
        for what in COMPARISONS
        if what.endswith("per team, on every team page and API")
    },
    "idle GPU-h over the range, per team": ("ledger.chargeback", "row_dict", inflate),
    "GPU-hours and cost per workload over the range": ("ledger.chargeback", "row_dict", inflate),
    "allocated GPU-h over the range, fleet": ("ledger.chargeback", "totals_dict", inflate),
    "borrowed and lent GPU-h over the range: cohort lender→borrower table vs chargeback": (
        "dashboard.views.cohorts",
        "borrowing_flows",
        inflate,
    ),
    "quota used over the range, per team and flavor (My teams)": (
        "ledger.chargeback",
        "row_dict",
        inflate,
    ),
    "admitted, nominal and pending GPUs now, per queue": (
        "dashboard.views.cluster_queues",
        "holding_gpus",
        inflate,
    ),
    "nominal and admitted GPUs now, per cohort": (
        "dashboard.views.cohorts",
        "holding_gpus",
        inflate,
    ),
    "GPUs and GPUs held now, per node: fleet map vs node page": (
        "dashboard.views.nodes",
        "node_capacity",
        inflate,
    ),
    "capacity and GPUs held now: overview vs fleet map": (
        "dashboard.views.fleet_map",
        "node_capacities",
        inflate,
    ),
    "busy but not working now (GPUs)": (
        "dashboard.views.busy",
        "busy_gpus_now",
        total_inflated,
    ),
    "busy but not working over the range (GPU-h)": (
        "dashboard.views.busy",
        "fleet_figures",
        inflate,
    ),
    "busy but not working GPU-h per team: busy page vs its chart JSON": (
        "dashboard.charts.busy",
        "busy_by_team",
        inflate,
    ),
    "pending GPUs now, by flavor, on the overview": (
        "dashboard.views.overview",
        "pending_while_free",
        inflate,
    ),
    "chargeback per team: chargeback page vs chargeback API": (
        "ledger.chargeback",
        "row_dict",
        inflate,
    ),
    "admitted, pending and nominal GPUs now, per queue: queue page vs cluster-queues API": (
        "quotas.api.views",
        "pending_gpus",
        inflate,
    ),
    "GPUs admitted (quota) per workload: workload page vs workloads API": (
        "dashboard.views.workloads",
        "figure",
        misprinted,
    ),
    "SM_ACTIVE now, per GPU: node page vs GPU page": ("dashboard.views.gpus", "gpu_rows", hotter),
    "GPU-hours, cost and GPUs held, per workload: workload page vs list, team page, chargeback": (
        "dashboard.views.workloads",
        "workload_charges",
        inflate,
    ),
    "why a workload is pending: one sentence on every page and the quota preview": (
        "dashboard.views.cluster_queues",
        "workload_reason",
        reworded,
    ),
    "GPU flavor of each holding workload, MIG ones too": (
        "dashboard.views.teams",
        "gpu_flavor",
        reworded,
    ),
}


@pytest.mark.parametrize("what", sorted(PERTURBED))
def test_each_comparison_fails_when_one_place_is_wrong(reads, monkeypatch, what):
    """The meta-test: one place's source made wrong, the comparison must see a disagreement."""
    import importlib

    module_name, name, wrong = PERTURBED[what]
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args, **kwargs: wrong(original(*args, **kwargs)))
    compared = COMPARISONS[what](reads)
    disagreeing = [
        subject
        for subject, pairs in compared.items()
        if not all(agrees(pairs[0][1], value) for _where, value in pairs[1:])
    ]
    assert disagreeing, f"{what}: {module_name}.{name} made wrong, and every place still agrees"


def test_the_world_has_what_the_comparisons_need(shared_reads):
    """The scenario's elements, so a comparison cannot pass on an empty fleet."""
    from fleet.choices import ActivitySource
    from fleet.models import Gpu
    from ledger.models import GpuUsage
    from quotas.models import Workload

    assert Gpu.objects.exclude(gi_id="").exists()  # MIG
    assert GpuUsage.objects.filter(shared=True).exists()  # time-slicing
    assert GpuUsage.objects.filter(activity_source=ActivitySource.GR_ENGINE_ACTIVE).exists()
    assert any("flavor a100" in w.state_message for w in Workload.objects.pending())
    assert shared_reads.chargeback("team")["totals"]["borrowed_gpu_hours"] > 0
    assert shared_reads.overview.context["now"].busy > 0
    assert shared_reads.overview.context["now"].idle > 0

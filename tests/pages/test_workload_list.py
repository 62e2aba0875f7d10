"""/workloads/ (search, filters, sorting by GPU-hours, idle share and cost) and the navigation
search, on the ``build_world`` scenario; expected figures are summed from the created rollups."""

from __future__ import annotations

import copy
from datetime import timedelta
from decimal import Decimal
from importlib import import_module

import pytest
from django.urls import reverse

from dashboard.templatetags.formatting import figure as fmt
from ledger.choices import RateKind, RollupScope
from ledger.models import HourlyRollup, RateCard
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW, new_world, range_hours, rollup_sum

H100_PRICE = Decimal("2.50")


def priced_world():
    world = new_world(NOW)
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=H100_PRICE,
        effective_from=NOW.replace(year=2020),
    )
    return world


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, priced_world, NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


@pytest.fixture
def lead_user(world):
    return world.lead


def rows(response) -> list[str]:
    return [row["workload"].name for row in response.context["rows"]]


def expected(world, key: str) -> dict:
    hours = range_hours(world, 1)
    workload = world.wl[key]
    filters = {"scope": RollupScope.WORKLOAD, "workload": workload}
    allocated = rollup_sum("allocated_gpu_hours", hours, **filters)
    idle = rollup_sum("idle_gpu_hours", hours, **filters)
    return {
        "gpu_hours": allocated,
        "idle_share": idle / allocated,
        "cost": Decimal(str(allocated)) * H100_PRICE,
    }


def about_the_range(world, w) -> bool:
    """Whether the 24 h list shows ``w``: live, ended in the last 24 h, or holding GPU-hours."""
    start = NOW - timedelta(hours=24)
    ended_at = w.finished_at or w.deleted_at
    ended = w.state in ("succeeded", "failed") or w.deleted_at is not None
    held = rollup_sum(
        "allocated_gpu_hours", range_hours(world, 1), scope=RollupScope.WORKLOAD, workload=w
    )
    return not ended or (ended_at is not None and ended_at >= start) or held > 0


@pytest.mark.django_db
def test_the_list_shows_gpu_hours_idle_share_and_cost_per_workload(staff_client, world):
    response = staff_client.get(reverse("dashboard:workload-list"), {"range": "24h"})

    assert response.status_code == 200
    by_name = {row["workload"].name: row for row in response.context["rows"]}
    # Every workload but those that ended before the range and held nothing in it.
    assert set(by_name) == {w.name for w in world.wl.values() if about_the_range(world, w)}
    assert len(by_name) < len(world.wl)  # the world has a job that ended days ago
    for key in ("a1", "a2"):
        want = expected(world, key)
        row = by_name[world.wl[key].name]
        assert row["gpu_hours"] == fmt(want["gpu_hours"])
        assert row["idle_share"] == f"{want['idle_share'] * 100:.1f}"
        assert row["cost"] == f"{want['cost']:,.2f}"
    # No rollups: no GPU-hours and no cost, never a crash.
    assert by_name[world.wl["b2"].name]["gpu_hours"] == "0"
    assert by_name[world.wl["b2"].name]["cost"] == "0.00"


@pytest.mark.django_db
@pytest.mark.parametrize("sort", ["gpu_hours", "idle_share", "cost"])
def test_the_list_sorts_by_a_figure_highest_first(staff_client, world, sort):
    response = staff_client.get(reverse("dashboard:workload-list"), {"sort": sort})

    names = rows(response)
    ranked = sorted(("a1", "a2"), key=lambda key: expected(world, key)[sort], reverse=True)
    assert names[:2] == [world.wl[key].name for key in ranked]


def ranked_pages(client, params: dict) -> list[str]:
    """Every page of the list at one row a page, in order (no in-page re-sort to hide behind)."""
    names: list[str] = []
    page = 1
    while True:
        response = client.get(reverse("dashboard:workload-list"), {**params, "page": page})
        names += rows(response)
        if not response.context["page_obj"].has_next():
            return names
        page += 1


@pytest.mark.django_db
@pytest.mark.parametrize("sort", ["gpu_hours", "idle_share", "cost"])
def test_after_the_ranked_workloads_come_the_others_newest_first(
    staff_client, world, sort, monkeypatch
):
    monkeypatch.setattr(import_module("dashboard.views.workload_list"), "PAGE_SIZE", 1)

    names = ranked_pages(staff_client, {"sort": sort})

    ranked = sorted(("a1", "a2"), key=lambda key: expected(world, key)[sort], reverse=True)
    others = sorted(
        (w for key, w in world.wl.items() if key not in ("a1", "a2") and about_the_range(world, w)),
        key=lambda w: (-w.observed_at.timestamp(), w.pk),
    )
    assert names == [world.wl[key].name for key in ranked] + [w.name for w in others]


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["usage", "quota"])
def test_the_cost_sort_prices_each_hour_with_the_card_in_force(
    staff_client, world, model, monkeypatch, settings
):
    """b1 ran 5 GPUs on a100, whose price rises from 1.00 to 9.00 mid-range: priced by the card
    in force each hour it ranks between a2 and a1 (usage model), above a single price's rank
    either way; the quota model prices its nominal and borrowed GPU-hours."""
    settings.GPULEDGER_CHARGEBACK_MODEL = model
    monkeypatch.setattr(import_module("dashboard.views.workload_list"), "PAGE_SIZE", 1)
    hours = range_hours(world, 1)
    rise = hours[len(hours) // 2]
    for price, since in ((Decimal("1.00"), NOW.replace(year=2020)), (Decimal("9.00"), rise)):
        RateCard.objects.create(
            kind=RateKind.ALLOCATED, flavor="a100", price_per_gpu_hour=price, effective_from=since
        )
    RateCard.objects.create(
        kind=RateKind.LENDING,
        flavor="h100",
        price_per_gpu_hour=Decimal("0.50"),
        effective_from=NOW.replace(year=2020),
    )
    b1 = world.wl["b1"]
    for hour in hours:
        HourlyRollup.objects.create(
            cluster=world.cluster,
            scope=RollupScope.WORKLOAD,
            key=f"{b1.namespace}/{b1.name}",
            hour=hour,
            flavor="a100",
            workload=b1,
            team=world.beta,
            cluster_queue=world.cq_b,
            allocated_gpu_hours=5.0,
            nominal_gpu_hours=3.0,
            borrowed_gpu_hours=2.0,
            windows=60,
        )

    def cost(key: str) -> Decimal:
        total = Decimal(0)
        for row in HourlyRollup.objects.filter(
            scope=RollupScope.WORKLOAD, workload=world.wl[key], hour__in=hours
        ):
            if row.flavor == "a100":
                price = Decimal("9.00") if row.hour >= rise else Decimal("1.00")
            else:
                price = H100_PRICE
            if model == "usage":
                total += Decimal(str(row.allocated_gpu_hours)) * price
            else:
                total += Decimal(str(row.nominal_gpu_hours + row.borrowed_gpu_hours)) * price
                if row.flavor == "h100":
                    total -= Decimal(str(row.lent_gpu_hours)) * Decimal("0.50")
        return total.quantize(Decimal("0.01"))

    names = ranked_pages(staff_client, {"sort": "cost", "range": "24h"})

    # Equal costs (a1 and a2 have no quota GPU-hours) newest first.
    ranked = sorted(
        ("a1", "a2", "b1"), key=lambda key: (-cost(key), -world.wl[key].observed_at.timestamp())
    )
    assert names[:3] == [world.wl[key].name for key in ranked]
    monkeypatch.undo()  # the page size again: one page shows all three
    costs = {row["workload"].name: row["cost"] for row in staff_client.get(
        reverse("dashboard:workload-list"), {"sort": "cost", "range": "24h"}
    ).context["rows"]}  # fmt: skip
    assert costs[b1.name] == f"{cost('b1'):,.2f}"


@pytest.mark.django_db
def test_the_list_sorts_by_name(staff_client, world):
    # 7 days: a4 finished 30 h ago (a 24 h list leaves it out).
    names = rows(
        staff_client.get(reverse("dashboard:workload-list"), {"sort": "name", "range": "7d"})
    )

    keys = sorted((w.namespace, w.name) for w in world.wl.values())
    assert names == [name for _, name in keys]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "keys"),
    [
        ({"q": "llama"}, {"a1", "a3"}),
        ({"q": "team-b"}, {"b1", "b2", "c1"}),  # namespace and queue
        ({"q": "pending"}, {"a3", "a5", "b2"}),  # state
        ({"state": "finished"}, {"a4"}),
        ({"queue": "team-a", "state": "holding"}, {"a1", "a2"}),
        ({"owner_kind": "Job"}, {"a1"}),
        ({"team": "beta"}, {"b1", "b2", "c1"}),
    ],
)
def test_the_list_searches_and_filters(staff_client, world, params, keys):
    week = {"range": "7d", **params}  # a4 finished 30 h ago
    names = set(rows(staff_client.get(reverse("dashboard:workload-list"), week)))

    assert names == {world.wl[key].name for key in keys}


@pytest.mark.django_db
def test_a_lead_lists_only_their_teams_workloads(lead_client, world):
    names = set(rows(lead_client.get(reverse("dashboard:workload-list"), {"range": "7d"})))

    assert names == {w.name for w in world.wl.values() if w.cluster_queue == world.cq_a}


@pytest.mark.django_db
def test_bad_list_parameters_are_a_400_naming_them(staff_client, world):
    response = staff_client.get(reverse("dashboard:workload-list"), {"sort": "gpu"})

    assert response.status_code == 400
    assert "sort" in response.content.decode()


@pytest.mark.django_db
def test_sorting_by_a_figure_reads_a_bounded_number_of_queries(
    staff_client, world, django_assert_max_num_queries
):
    with django_assert_max_num_queries(20):
        staff_client.get(reverse("dashboard:workload-list"), {"sort": "cost"})


@pytest.mark.django_db
def test_the_navigation_search_finds_every_kind(staff_client, world):
    gpu = world.gpus[0]
    for term, kind, label in [
        ("mixtral", "Workloads", f"team-a/{world.wl['a2'].name}"),
        ("team-b", "ClusterQueues", "team-b"),
        ("alph", "Teams", str(world.alpha)),
        (gpu.node.name, "Nodes", gpu.node.name),
        (gpu.uuid[-8:], "GPUs", gpu.uuid),
    ]:
        response = staff_client.get(reverse("dashboard:search"), {"q": term})
        groups = {
            group["kind"]: [item[0] for item in group["items"]]
            for group in response.context["groups"]
        }
        assert label in groups.get(kind, []), (term, groups)


@pytest.mark.django_db
def test_the_navigation_search_hides_other_teams_workloads(lead_client, world):
    response = lead_client.get(reverse("dashboard:search"), {"q": "job-"})

    groups = {g["kind"]: [item[0] for item in g["items"]] for g in response.context["groups"]}
    assert groups["Workloads"]
    assert all(label.startswith("team-a/") for label in groups["Workloads"])


@pytest.mark.django_db
def test_the_team_workload_table_shows_gpu_hours_and_cost(staff_client, world):
    response = staff_client.get(reverse("dashboard:team-detail", args=["alpha"]), {"range": "24h"})

    by_name = {row["workload"].name: row for row in response.context["workload_rows"]}
    for key in ("a1", "a2"):
        want = expected(world, key)
        assert by_name[world.wl[key].name]["gpu_hours"] == fmt(want["gpu_hours"])
        assert by_name[world.wl[key].name]["cost"] == f"{want['cost']:,.2f}"
    assert 'data-testid="workload-cost"' in response.content.decode()

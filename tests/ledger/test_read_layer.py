"""The rollup read layer against the hand-computed sums of tests/ledger/conftest.py.

The range is 10:00 to 13:20 with the clock at 13:20: hours 10:00, 11:00 and 12:00 count, the
13:00 hour is still in progress and does not.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest
import time_machine
from django.db import connection, models

from core.ranges import CUSTOM, TimeRange, covered_hours
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import FIGURES, Figures
from quotas.models import Team
from tests.ledger.conftest import H10, H11, H12, NOW
from tests.python_source import parse_file

TEAMS = HourlyRollup.objects.for_scope(RollupScope.TEAM)
SPAN = covered_hours(H10, NOW, NOW)  # 10:00, 11:00, 12:00


def teams_in_range():
    return HourlyRollup.objects.for_scope(RollupScope.TEAM).covering(H10, NOW, now=NOW)


def test_figures_per_team_are_the_hand_computed_sums(rollups):
    found = teams_in_range().figures(group_by=("team_id",))

    red, blue = found[rollups.red.pk], found[rollups.blue.pk]
    assert set(found) == {rollups.red.pk, rollups.blue.pk}
    # red: 4 + (8 + 1) + 2 GPU-hours at 10, 11 (two flavors) and 12; not the 1 at 13:00.
    assert red.allocated_gpu_hours == pytest.approx(15)
    assert red.telemetry_gpu_hours == pytest.approx(11)
    assert red.active_gpu_hours == pytest.approx(5.5)
    assert red.idle_gpu_hours == pytest.approx(1)
    assert red.tensor_active_gpu_hours == pytest.approx(2.5)
    assert red.tensor_covered_gpu_hours == pytest.approx(10)
    assert red.gpu_util_gpu_hours == pytest.approx(7.5)
    assert red.busy_not_working_gpu_hours == pytest.approx(1.5)
    assert red.nominal_gpu_hours == pytest.approx(20)
    assert red.borrowed_gpu_hours == pytest.approx(2)
    assert red.lent_gpu_hours == pytest.approx(2)
    assert red.pending_gpu_hours == pytest.approx(4)
    assert red.peak_allocated_gpus == 9  # the largest row peak, not their sum
    assert (blue.allocated_gpu_hours, blue.idle_gpu_hours) == (pytest.approx(4), pytest.approx(4))


def test_ratios_come_from_the_summed_hours(rollups):
    red = teams_in_range().figures(group_by=("team_id",))[rollups.red.pk]

    assert red.utilization == pytest.approx(5.5 / 11)
    assert red.telemetry_coverage == pytest.approx(11 / 15)
    assert red.no_telemetry_gpu_hours == pytest.approx(4)
    assert red.idle_share == pytest.approx(1 / 15)
    assert red.tensor_activity == pytest.approx(0.25)
    assert red.mean_gpu_util == pytest.approx(0.75)
    assert red.busy_share == pytest.approx(0.1)
    assert red.quota_allocation_rate == pytest.approx(15 / 20)
    assert red.mean_gpus("allocated_gpu_hours", 3) == pytest.approx(5)


def test_a_ratio_without_telemetry_is_unknown_not_zero(rollups):
    # red at 12:00: 2 GPU-hours allocated, none with telemetry.
    only_noon = TEAMS.covering(H12, H12.replace(hour=13), now=NOW).filter(team=rollups.red)

    noon = only_noon.total()

    assert noon.allocated_gpu_hours == 2
    assert noon.utilization is None
    assert noon.telemetry_coverage == 0
    assert noon.tensor_activity is None


def test_total_sums_every_group_and_is_zero_without_rows(rollups):
    total = teams_in_range().total()
    empty = teams_in_range().filter(key="nobody").total()

    assert total.allocated_gpu_hours == pytest.approx(19)
    assert total.utilization == pytest.approx((5.5 + 0.4) / 15)
    assert empty == Figures()
    assert empty.utilization is None


def test_fleet_allocation_rate_is_against_capacity(rollups):
    fleet = HourlyRollup.objects.for_scope(RollupScope.FLEET).covering(H10, NOW, now=NOW).total()

    assert fleet.capacity_gpu_hours == pytest.approx(48)
    assert fleet.allocation_rate == pytest.approx(19 / 48)


def test_figures_group_by_several_fields_keyed_by_tuples(rollups):
    found = teams_in_range().filter(team=rollups.red).figures(group_by=("key", "flavor"))

    assert set(found) == {("red", "h100"), ("red", "a100")}
    assert found[("red", "h100")].allocated_gpu_hours == pytest.approx(14)
    assert found[("red", "a100")].allocated_gpu_hours == pytest.approx(1)


@pytest.mark.parametrize(("groups", "work_mem"), [(200, "4MB"), (31_000, "31MB"), (10**6, "64MB")])
def test_an_aggregate_into_known_groups_hashes_in_memory_sized_for_them(rollups, groups, work_mem):
    settings: list[list[object]] = []

    def record(execute, sql, params, many, context):
        if "set_config" in sql:
            settings.append(list(params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        hashed = teams_in_range().figures(group_by=("team_id",), hash_groups=groups)

    assert hashed == teams_in_range().figures(group_by=("team_id",))
    if connection.vendor == "postgresql":
        assert settings == [["enable_sort", "off", "work_mem", work_mem]]
    else:
        assert settings == []


def test_names_limit_the_figures_read_and_the_rest_stay_zero(rollups):
    red = teams_in_range().figures(group_by=("team_id",), names=("allocated_gpu_hours",))[
        rollups.red.pk
    ]

    assert red.allocated_gpu_hours == pytest.approx(15)
    assert red.active_gpu_hours == 0
    with pytest.raises(ValueError, match="not rollup figures: allocated"):
        teams_in_range().figures(group_by=("team_id",), names=("allocated",))


def test_order_by_a_figure_and_limit_give_the_top_groups(rollups):
    top = teams_in_range().figures(group_by=("key",), order_by=("-idle_gpu_hours", "key"), limit=1)

    assert list(top) == ["blue"]  # 4 idle GPU-hours against red's 1


def test_hourly_is_one_figures_per_counted_hour_of_a_page_range(rollups):
    page_range = TimeRange(H10, NOW, CUSTOM)

    with time_machine.travel(NOW, tick=False):
        hours = HourlyRollup.objects.for_scope(RollupScope.FLEET).hourly(page_range)
        x_axis = page_range.complete_hours()

    assert x_axis == [H10, H11, H12]
    assert [h.allocated_gpu_hours if h else None for h in hours] == [6, 9, 4]
    assert [h.capacity_gpu_hours if h else None for h in hours] == [16, 16, 16]


def test_series_per_team_aligns_hours_and_leaves_gaps(rollups):
    series = TEAMS.series(SPAN, ("team_id",))

    red = [f.allocated_gpu_hours if f else None for f in series[rollups.red.pk]]
    blue = [f.allocated_gpu_hours if f else None for f in series[rollups.blue.pk]]
    assert red == [4, 9, 2]  # 11:00 sums its two flavors
    assert blue == [2, None, 2]  # no row at 11:00: no data, not 0
    assert TEAMS.filter(key="nobody").hourly(SPAN) == [None, None, None]


def test_a_row_has_its_figures_and_ratios(rollups):
    row = TEAMS.get(key="red", hour=H10)

    assert row.figures.allocated_gpu_hours == 4
    assert row.utilization == pytest.approx(0.5)
    assert row.telemetry_coverage == pytest.approx(1.0)


def test_figures_are_exactly_the_rollup_figure_columns():
    columns = {
        field.name
        for field in HourlyRollup._meta.get_fields()
        if isinstance(field, models.FloatField)
    }

    assert set(FIGURES) == columns
    assert HourlyRollup.FIGURES == FIGURES == tuple(f.name for f in fields(Figures))


def test_the_chargeback_reads_what_its_covering_index_carries():
    assert HourlyRollup.figures_in_index("fleet_rollup_chargeback") == (
        "capacity_gpu_hours",
        "allocated_gpu_hours",
        "telemetry_gpu_hours",
        "active_gpu_hours",
        "idle_gpu_hours",
        "nominal_gpu_hours",
        "borrowed_gpu_hours",
        "lent_gpu_hours",
        "pending_gpu_hours",
    )


READ_LAYER = Path("ledger") / "read.py"


def _figure_sums(path: Path) -> list[str]:
    """``Sum("allocated_gpu_hours")`` and the like: an aggregate of a rollup figure column."""
    found = []
    for node in ast.walk(parse_file(path)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        first = node.args[0]
        if (
            name in {"Sum", "Max", "Min", "Avg"}
            and isinstance(first, ast.Constant)
            and first.value in FIGURES
        ):
            found.append(f"{path}:{node.lineno} {name}({first.value!r})")
    return found


def test_no_module_outside_the_read_layer_sums_rollup_figures(tmp_path):
    root = Path(__file__).resolve().parents[2]
    offenders = [
        found
        for app in ("core", "fleet", "quotas", "ledger", "dashboard", "demo")
        for path in sorted((root / app).rglob("*.py"))
        if "migrations" not in path.parts and path.relative_to(root) != READ_LAYER
        for found in _figure_sums(path)
    ]
    sample = tmp_path / "page.py"
    sample.write_text('rows.annotate(a=Sum("allocated_gpu_hours"), b=models.Max("key"))\n')

    assert offenders == []
    # The check sees such a sum (so the walk above is not vacuous).
    assert _figure_sums(sample) == [f"{sample}:1 Sum('allocated_gpu_hours')"]


def test_ranking_orders_groups_by_a_summed_figure(rollups):
    # Allocated over 10:00-13:00: red 15, blue 4; idle: red 1, blue 4.
    assert list(teams_in_range().ranking("key", "allocated_gpu_hours")) == ["red", "blue"]
    assert list(teams_in_range().ranking("key", "idle_gpu_hours")) == ["blue", "red"]


def test_ranking_by_a_ratio_leaves_out_groups_without_its_denominator(rollups):
    HourlyRollup.objects.create(
        cluster=rollups.cluster, scope=RollupScope.TEAM, key="green", hour=H10, windows=60
    )

    # Idle share: blue 4 / 4 = 1, red 1 / 15; green allocated nothing: unknown, not ranked.
    assert list(teams_in_range().ranking("key", "idle_share")) == ["blue", "red"]
    assert list(teams_in_range().ranking("key", "allocated_gpu_hours", then=("key",))) == [
        "red",
        "blue",
        "green",
    ]


def test_ranking_ties_by_a_field_of_the_groups_row_as_the_ranked_queryset_orders_them(rollups):
    """Groups ranked first, then the row they point at joined for the ties: the order of
    ``ranked`` (which joins it to every rollup row), and ``limit`` keeps its first groups."""
    green = Team.objects.create(name="green", display_name="A")
    rollups.red.display_name, rollups.blue.display_name = "C", "B"
    rollups.red.save()
    rollups.blue.save()
    for team in (rollups.blue, green):
        # Every team's cost is 0: the order is the ties' order, display name descending.
        HourlyRollup.objects.create(
            cluster=rollups.cluster, scope=RollupScope.TEAM, key=f"{team.name}-extra", hour=H12,
            team=team, windows=60,
        )  # fmt: skip
    free = [("allocated_gpu_hours", models.Value(0.0, output_field=models.FloatField()), 1)]
    how = {"priced": free, "then": ("-team__display_name", "team_id")}

    ranked = teams_in_range().ranking("team_id", "cost", **how)

    assert ranked == [rollups.red.pk, rollups.blue.pk, green.pk]
    assert ranked == list(teams_in_range().ranked("team_id", "cost", **how))
    assert teams_in_range().ranking("team_id", "cost", limit=2, **how) == ranked[:2]
    by_hours = teams_in_range().ranking("team_id", "allocated_gpu_hours", then=("team_id",))
    assert by_hours == [rollups.red.pk, rollups.blue.pk, green.pk]
    with pytest.raises(ValueError, match="ties"):
        teams_in_range().ranking("team_id", "cost", priced=free, then=("cluster__name",))


def test_ranking_by_cost_sums_priced_rows_rounded_to_cents(rollups):
    # Blue's GPU-hours cost 10.005 each, red's 1: blue 4 x 10.005 = 40.02, red 15 x 1 = 15,
    # less 0.5 per lent GPU-hour (red lent 2: 14).
    price = models.Case(
        models.When(key="blue", then=models.Value(10.005)),
        default=models.Value(1.0),
        output_field=models.FloatField(),
    )
    credit = models.Value(0.5, output_field=models.FloatField())
    ranked = teams_in_range().ranking(
        "key", "cost", priced=[("allocated_gpu_hours", price, 1), ("lent_gpu_hours", credit, -1)]
    )

    assert list(ranked) == ["blue", "red"]
    # Equal costs (every price 0) keep the ``then`` order.
    free = [("allocated_gpu_hours", models.Value(0.0, output_field=models.FloatField()), 1)]
    assert list(teams_in_range().ranking("key", "cost", priced=free, then=("key",))) == [
        "blue",
        "red",
    ]
    assert list(teams_in_range().ranking("key", "cost", priced=free, then=("-key",))) == [
        "red",
        "blue",
    ]
    with pytest.raises(ValueError, match="priced"):
        teams_in_range().ranking("key", "cost")
    with pytest.raises(ValueError, match="not rollup figures"):
        teams_in_range().ranking("key", "allocated")


def test_a_flavor_without_a_rate_card_is_warned_about_once_per_process(monkeypatch, caplog):
    from ledger.chargeback import Charge, Pricer, pricing

    monkeypatch.setattr(pricing, "_WARNED", set())
    caplog.set_level("DEBUG", logger="ledger.chargeback")
    for _ in range(3):  # three requests, each with its own pricer
        pricer = Pricer(H10, NOW, "USD", "usage", cards=[])
        for _ in range(2):
            pricer.price_piece(Charge(allocated_gpu_hours=2.0), "h100", "H100", 0)

    said = [
        (r.levelname, r.getMessage()) for r in caplog.records if "no rate card" in r.getMessage()
    ]
    assert [level for level, _ in said] == ["WARNING", "DEBUG", "DEBUG"]
    assert "'h100'" in said[0][1] and "USD" in said[0][1]

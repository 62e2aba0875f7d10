"""GET /api/v1/chargeback/ against the hand-computed scenario of tests/api/conftest.py."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.test import override_settings

from tests.api.conftest import END, START

URL = "/api/v1/chargeback/"
WINDOW = {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z"}

# Ground truth over the whole window, by hand (see the conftest docstring).
ALPHA = {
    "allocated_gpu_hours": 16.0,
    "active_gpu_hours": 6.0,
    "idle_gpu_hours": 2.0,
    "no_telemetry_gpu_hours": 4.0,
    "utilization": 0.5,
    "telemetry_coverage": 0.75,
    "borrowed_gpu_hours": 0.0,
    "lent_gpu_hours": 4.0,
    "nominal_gpu_hours": 24.0,
    "pending_gpu_hours": 0.0,
}
BETA = {
    "allocated_gpu_hours": 8.0,
    "active_gpu_hours": 6.0,
    "idle_gpu_hours": 0.0,
    "no_telemetry_gpu_hours": 0.0,
    "utilization": 0.75,
    "telemetry_coverage": 1.0,
    "borrowed_gpu_hours": 4.0,
    "lent_gpu_hours": 0.0,
    "nominal_gpu_hours": 4.0,
    "pending_gpu_hours": 12.0,
}
# Usage model: alpha 8 GPU-h at 3.00 (January) + 8 at 4.00 (from 2026-02-01); beta 8 at 2.00.
ALPHA_USAGE_COST = 8 * 3 + 8 * 4
BETA_USAGE_COST = 8 * 2
HOUR_FIELDS = list(ALPHA)


def get(client, **params):
    return client.get(URL, {**WINDOW, **params})


def by_group(body):
    return {row["group"]: row for row in body["rows"]}


def assert_figures(row, expected):
    for name, value in expected.items():
        assert row[name] == pytest.approx(value), name


# --- Figures per group --------------------------------------------------------------------------


def test_team_rows_match_the_hand_computed_figures(staff_client, scenario):
    response = get(staff_client, group_by="team")

    assert response.status_code == 200
    body = response.json()
    assert body["start"] == "2026-01-31T22:00:00Z"
    assert body["end"] == "2026-02-01T02:00:00Z"
    assert body["group_by"] == "team"
    assert body["step"] == "none"
    assert body["currency"] == "USD"
    rows = by_group(body)
    assert set(rows) == {"alpha", "beta", "gamma"}
    assert_figures(rows["alpha"], ALPHA)
    assert_figures(rows["beta"], BETA)
    assert rows["alpha"]["cost"] == {
        "allocated": ALPHA_USAGE_COST,
        "borrowing": 0,
        "lending_credit": 0,
        "total": ALPHA_USAGE_COST,
    }
    assert rows["beta"]["cost"]["total"] == BETA_USAGE_COST
    assert "capacity_gpu_hours" not in rows["alpha"]


def test_a_team_without_usage_appears_with_zeros_and_null_ratios(staff_client, scenario):
    rows = by_group(get(staff_client, group_by="team").json())

    gamma = rows["gamma"]
    assert gamma["allocated_gpu_hours"] == 0
    assert gamma["utilization"] is None
    assert gamma["telemetry_coverage"] is None
    assert gamma["cost"]["total"] == 0


@pytest.mark.parametrize(
    ("group_by", "alpha_key", "beta_key", "others"),
    [
        ("cluster_queue", "cq-alpha", "cq-beta", {"cq-gamma"}),
        ("local_queue", "alpha-ns/lq-a", "beta-ns/lq-b", set()),
        ("namespace", "alpha-ns", "beta-ns", set()),
        ("workload", "alpha-ns/train-1", "beta-ns/infer-1", set()),
    ],
)
def test_queue_namespace_and_workload_rows_match(
    staff_client, scenario, group_by, alpha_key, beta_key, others
):
    body = get(staff_client, group_by=group_by).json()
    rows = by_group(body)

    assert set(rows) == {alpha_key, beta_key} | others
    usage_only = ["allocated_gpu_hours", "active_gpu_hours", "idle_gpu_hours", "utilization"]
    assert_figures(rows[alpha_key], {k: ALPHA[k] for k in usage_only})
    assert_figures(rows[beta_key], {k: BETA[k] for k in usage_only})
    assert rows[alpha_key]["cost"]["total"] == ALPHA_USAGE_COST
    assert rows[beta_key]["cost"]["total"] == BETA_USAGE_COST
    assert rows[alpha_key]["cluster"] == "test"


def test_a_queue_deleted_before_the_window_is_left_out(staff_client, scenario):
    rows = by_group(get(staff_client, group_by="cluster_queue").json())

    assert "cq-old" not in rows
    assert rows["cq-gamma"]["allocated_gpu_hours"] == 0


def test_cohort_sums_its_queues(staff_client, scenario):
    rows = by_group(get(staff_client, group_by="cohort").json())

    research = rows["research"]
    assert research["allocated_gpu_hours"] == pytest.approx(24.0)
    assert research["active_gpu_hours"] == pytest.approx(12.0)
    assert research["utilization"] == pytest.approx(12.0 / 20.0)
    assert research["borrowed_gpu_hours"] == pytest.approx(4.0)
    assert research["cost"]["total"] == ALPHA_USAGE_COST + BETA_USAGE_COST


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        ("cluster", {"test": (48.0, 24.0, ALPHA_USAGE_COST + BETA_USAGE_COST)}),
        ("node", {"node-1": (32.0, 16.0, ALPHA_USAGE_COST), "node-2": (16.0, 8.0, 16)}),
        ("flavor", {"h100": (32.0, 16.0, ALPHA_USAGE_COST), "a100": (16.0, 8.0, 16)}),
    ],
)
def test_capacity_groups_carry_capacity(staff_client, scenario, group_by, expected):
    rows = by_group(get(staff_client, group_by=group_by).json())

    assert set(rows) == set(expected)
    for key, (capacity, allocated, cost) in expected.items():
        assert rows[key]["capacity_gpu_hours"] == pytest.approx(capacity)
        assert rows[key]["allocated_gpu_hours"] == pytest.approx(allocated)
        assert rows[key]["cost"]["total"] == cost


@pytest.mark.parametrize(
    "group_by",
    ["team", "cluster_queue", "local_queue", "cohort", "namespace", "workload", "flavor", "node",
     "cluster"],
)  # fmt: skip
@pytest.mark.parametrize("step", ["none", "hour", "day", "month"])
def test_rows_sum_to_the_totals(staff_client, scenario, group_by, step):
    body = get(staff_client, group_by=group_by, step=step).json()

    totals = body["totals"]
    for name in ["allocated_gpu_hours", "active_gpu_hours", "idle_gpu_hours",
                 "no_telemetry_gpu_hours", "borrowed_gpu_hours", "lent_gpu_hours",
                 "nominal_gpu_hours", "pending_gpu_hours"]:  # fmt: skip
        assert sum(row[name] for row in body["rows"]) == pytest.approx(totals[name]), name
    for name in ["allocated", "borrowing", "lending_credit", "total"]:
        summed = sum(Decimal(str(row["cost"][name])) for row in body["rows"])
        assert summed == Decimal(str(totals["cost"][name])), name


def test_totals_recompute_ratios_from_sums(staff_client, scenario):
    totals = get(staff_client, group_by="team").json()["totals"]

    # (6 + 6) active over (12 + 8) telemetry; never the sum or mean of the row ratios.
    assert totals["utilization"] == pytest.approx(12.0 / 20.0)
    assert totals["telemetry_coverage"] == pytest.approx(20.0 / 24.0)
    assert totals["allocated_gpu_hours"] == pytest.approx(24.0)
    assert totals["cost"]["total"] == ALPHA_USAGE_COST + BETA_USAGE_COST


def test_the_cluster_parameter_keeps_one_cluster(staff_client, scenario):
    from fleet.models import Cluster
    from ledger.models import HourlyRollup

    other = Cluster.objects.create(name="other")
    HourlyRollup.objects.create(
        cluster=other, scope="team", key="alpha", hour=START, allocated_gpu_hours=10.0
    )

    merged = by_group(get(staff_client, group_by="team").json())
    only_test = by_group(get(staff_client, group_by="team", cluster="test").json())

    assert merged["alpha"]["allocated_gpu_hours"] == pytest.approx(26.0)
    assert only_test["alpha"]["allocated_gpu_hours"] == pytest.approx(16.0)
    assert only_test["alpha"]["cluster"] == "test"


# --- Steps --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "first", "second"),
    [
        ("day", "2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z"),
        ("month", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
    ],
)
def test_day_and_month_steps_split_at_utc_boundaries(staff_client, scenario, step, first, second):
    body = get(staff_client, group_by="team", step=step).json()

    rows = {(row["group"], row["period_start"]): row for row in body["rows"]}
    assert set(rows) == {(team, period) for team in ("alpha", "beta", "gamma")
                         for period in (first, second)}  # fmt: skip
    # 22:00 and 23:00 on January 31st; 00:00 and 01:00 on February 1st.
    assert_figures(
        rows[("alpha", first)],
        {"allocated_gpu_hours": 8, "active_gpu_hours": 4, "idle_gpu_hours": 2,
         "utilization": 0.5, "telemetry_coverage": 1.0},
    )  # fmt: skip
    assert_figures(
        rows[("alpha", second)],
        {"allocated_gpu_hours": 8, "active_gpu_hours": 2, "no_telemetry_gpu_hours": 4,
         "utilization": 0.5, "telemetry_coverage": 0.5},
    )  # fmt: skip
    assert rows[("alpha", first)]["cost"]["total"] == 24
    assert rows[("alpha", second)]["cost"]["total"] == 32
    assert rows[("beta", first)]["cost"]["total"] == 8
    assert rows[("gamma", second)]["allocated_gpu_hours"] == 0


def test_hour_step_has_one_row_per_hour(staff_client, scenario):
    body = get(staff_client, group_by="namespace", step="hour").json()

    alpha = [row for row in body["rows"] if row["group"] == "alpha-ns"]
    assert [row["period_start"] for row in alpha] == [
        "2026-01-31T22:00:00Z",
        "2026-01-31T23:00:00Z",
        "2026-02-01T00:00:00Z",
        "2026-02-01T01:00:00Z",
    ]
    assert [row["cost"]["total"] for row in alpha] == [12, 12, 16, 16]
    assert [row["telemetry_coverage"] for row in alpha] == [1.0, 1.0, 0.5, 0.5]


# --- Cost models --------------------------------------------------------------------------------


@override_settings(GPULEDGER_CHARGEBACK_MODEL="quota")
def test_quota_model_charges_nominal_plus_borrowing_minus_lending(staff_client, scenario):
    body = get(staff_client, group_by="team").json()
    rows = by_group(body)

    assert body["model"] == "quota"
    # alpha: nominal 12 GPU-h at 3.00 + 12 at 4.00; lent 4 GPU-h at 0.50 credit.
    assert rows["alpha"]["cost"] == {
        "allocated": 84,
        "borrowing": 0,
        "lending_credit": 2,
        "total": 82,
    }
    # beta: nominal 4 GPU-h at 2.00 (A100 card); borrowed 4 at 5.00.
    assert rows["beta"]["cost"] == {
        "allocated": 8,
        "borrowing": 20,
        "lending_credit": 0,
        "total": 28,
    }
    assert body["totals"]["cost"]["total"] == 110


def test_a_price_change_applies_from_its_date_and_past_hours_keep_theirs(staff_client, scenario):
    january = get(
        staff_client, group_by="team", start="2026-01-31T22:00:00Z", end="2026-02-01T00:00:00Z"
    ).json()
    february = get(
        staff_client, group_by="team", start="2026-02-01T00:00:00Z", end="2026-02-01T02:00:00Z"
    ).json()

    assert by_group(january)["alpha"]["cost"]["total"] == 8 * 3
    assert by_group(february)["alpha"]["cost"]["total"] == 8 * 4


def test_a_mid_hour_price_change_applies_from_the_next_whole_hour(staff_client, scenario):
    from ledger.models import RateCard

    RateCard.objects.create(
        flavor="h100",
        price_per_gpu_hour=Decimal("10"),
        effective_from=START.replace(minute=30),  # 22:30: the 23:00 hour on
    )

    rows = by_group(get(staff_client, group_by="team").json())

    # 22:00 at 3.00, 23:00 at 10.00, then the 4.00 card from 2026-02-01.
    assert rows["alpha"]["cost"]["total"] == 4 * 3 + 4 * 10 + 8 * 4


def test_cost_is_rounded_to_cents_only_at_output(staff_client, scenario):
    from ledger.models import HourlyRollup

    # 3 rows of 1/3 GPU-hour at 1.00 (default card): 0.333.. each, exactly 1.00 together.
    for i in range(3):
        HourlyRollup.objects.create(
            cluster=scenario["cluster"],
            scope="namespace",
            key="odd-ns",
            hour=START,
            flavor=f"f{i}",
            allocated_gpu_hours=1 / 3,
        )

    rows = by_group(get(staff_client, group_by="namespace").json())

    assert rows["odd-ns"]["cost"]["total"] == 1.0


# --- CSV ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["none", "day"])
def test_csv_round_trips_to_the_json_numbers(staff_client, scenario, step):
    body = get(staff_client, group_by="team", step=step).json()
    response = get(staff_client, group_by="team", step=step, format="csv")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    suffix = "" if step == "none" else "_day"
    assert response["Content-Disposition"] == (
        f'attachment; filename="chargeback_team_20260131T2200Z_20260201T0200Z{suffix}.csv"'
    )
    text = b"".join(response.streaming_content).decode()
    assert text.count("\r\n") == len(body["rows"]) + 1  # one header, CRLF line ends
    records = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(records) == len(body["rows"])
    for record, row in zip(records, body["rows"], strict=True):
        assert record["group"] == row["group"]
        if step != "none":
            assert record["period_start"] == row["period_start"]
        for name in HOUR_FIELDS:
            expected = row[name]
            assert (record[name] == "") if expected is None else (
                float(record[name]) == pytest.approx(expected)
            ), name  # fmt: skip
        for name, value in row["cost"].items():
            assert Decimal(record[f"cost_{name}"]) == Decimal(str(value))
        assert record["currency"] == "USD"


def test_csv_quotes_fields_as_rfc_4180(staff_client, scenario):
    from ledger.models import HourlyRollup

    HourlyRollup.objects.create(
        cluster=scenario["cluster"], scope="namespace", key='we,ird "ns"', hour=START
    )

    text = b"".join(get(staff_client, group_by="namespace", format="csv").streaming_content)

    assert b'"we,ird ""ns"""' in text


# --- Parameter errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "parameter", "reason"),
    [
        ({"group_by": "planet"}, "group_by", "is not one of"),
        ({"group_by": "team", "step": "week"}, "step", "is not one of"),
        ({"group_by": "team", "format": "xml"}, "format", "is not json or csv"),
        ({"group_by": "team", "start": ""}, "start", "required"),
        ({"group_by": "team", "end": "yesterday"}, "end", "is not an ISO 8601 datetime"),
        ({"group_by": "team", "start": "2026-01-31T22:00:00"}, "start", "naive"),
        ({"group_by": "team", "start": "2026-01-31T22:30:00Z"}, "start", "whole UTC hour"),
        ({"group_by": "team", "start": "2026-02-01T02:00:00Z"}, "end", "must be after start"),
        ({"group_by": "team", "start": "2026-02-02T00:00:00Z"}, "end", "must be after start"),
        ({"group_by": "team", "start": "2024-12-01T00:00:00Z"}, "end", "longer than 400 days"),
        ({"group_by": "team", "cluster": "nope"}, "cluster", "unknown cluster"),
        ({"group_by": "team", "cluster": "c\x00"}, "cluster", "NUL"),
    ],
)
def test_bad_parameters_get_a_400_naming_the_parameter(
    staff_client, scenario, params, parameter, reason
):
    response = staff_client.get(URL, {**WINDOW, **params})

    assert response.status_code == 400
    body = response.json()
    assert list(body) == [parameter]
    assert reason in body[parameter][0]


def test_a_missing_group_by_is_a_400(staff_client, scenario):
    response = staff_client.get(URL, WINDOW)

    assert response.status_code == 400
    assert "group_by" in response.json()


@override_settings(GPULEDGER_CHARGEBACK_MAX_DAYS=1)
def test_the_window_limit_follows_the_setting(staff_client, scenario):
    response = staff_client.get(
        URL, {"group_by": "team", "start": "2026-01-30T00:00:00Z", "end": "2026-02-01T00:00:00Z"}
    )

    assert response.status_code == 400
    assert "longer than 1 days" in response.json()["end"][0]


def test_an_offset_other_than_utc_is_converted(staff_client, scenario):
    response = staff_client.get(
        URL,
        {
            "group_by": "team",
            "start": "2026-02-01T00:00:00+02:00",
            "end": "2026-02-01T04:00:00+02:00",
        },
    )

    body = response.json()
    assert body["start"] == "2026-01-31T22:00:00Z"
    assert by_group(body)["alpha"]["allocated_gpu_hours"] == pytest.approx(16.0)


def test_rows_outside_the_window_never_count(staff_client, scenario):
    # The scenario puts 100 GPU-hours of alpha in the hour before START and the hour at END.
    rows = by_group(get(staff_client, group_by="team").json())

    assert rows["alpha"]["allocated_gpu_hours"] == pytest.approx(16.0)
    assert END.hour == 2


# --- Query counts -------------------------------------------------------------------------------


@pytest.mark.parametrize("group_by", ["team", "workload", "cluster_queue"])
def test_chargeback_runs_a_bounded_number_of_queries(
    staff_client, scenario, django_assert_max_num_queries, group_by
):
    from ledger.models import HourlyRollup

    HourlyRollup.objects.bulk_create(
        HourlyRollup(cluster=scenario["cluster"], scope="workload", key=f"ns/w{i}", hour=START,
                     allocated_gpu_hours=1.0)
        for i in range(50)
    )  # fmt: skip

    # 8 when built: the aggregate's planner settings (JIT off, work_mem) are one statement
    # (core.pgsettings), and the report's version (ledger.chargeback.cache) reads the window's
    # RollupHour records, one more.
    with django_assert_max_num_queries(8):
        response = get(staff_client, group_by=group_by, step="day")

    assert response.status_code == 200
    # Stored: the same report again reads only what its version is made of, no rollup.
    with django_assert_max_num_queries(6):
        again = get(staff_client, group_by=group_by, step="day")

    assert again.json() == response.json()


# --- Pricing: whether the costs mean anything ---------------------------------------------------


def test_priced_rows_say_so_and_the_note_says_every_hour_is_priced(staff_client, scenario):
    body = get(staff_client, group_by="team").json()

    rows = by_group(body)
    # alpha runs on h100 (a flavor card), beta on A100 (a GPU-model card), gamma holds nothing.
    assert rows["alpha"]["priced"] is True
    assert rows["beta"]["priced"] is True
    assert rows["gamma"]["priced"] is True
    assert body["pricing"]["complete"] is True
    assert body["pricing"]["unpriced_rows"] == 0
    # Six USD cards in the scenario; the EUR one is another currency.
    assert body["pricing"]["rate_cards"] == 6


def test_without_any_rate_card_every_row_is_unpriced_and_the_note_says_why(staff_client, scenario):
    from ledger.models import RateCard

    RateCard.objects.all().delete()
    body = get(staff_client, group_by="team").json()

    assert all(row["priced"] is False for row in body["rows"])
    assert all(row["cost"]["total"] == 0 for row in body["rows"])
    assert body["pricing"]["complete"] is False
    assert body["pricing"]["rate_cards"] == 0
    assert "No rate card in USD" in body["pricing"]["note"]
    assert "0.00" in body["pricing"]["note"]


def test_a_row_with_hours_no_card_prices_is_unpriced(staff_client, scenario):
    from ledger.models import RateCard

    # Only the A100 card stays: alpha's 16 h100 GPU-hours have no price, beta's 8 have one.
    RateCard.objects.exclude(gpu_model="A100").delete()
    body = get(staff_client, group_by="team").json()
    rows = by_group(body)

    assert rows["alpha"]["priced"] is False
    assert rows["alpha"]["cost"]["total"] == 0
    assert rows["beta"]["priced"] is True
    assert body["pricing"]["complete"] is False
    assert body["pricing"]["unpriced_rows"] == 1
    assert body["pricing"]["unpriced_gpu_hours"] == pytest.approx(ALPHA["allocated_gpu_hours"])
    csv_text = b"".join(get(staff_client, group_by="team", format="csv").streaming_content)
    records = {r["group"]: r for r in csv.DictReader(io.StringIO(csv_text.decode(), newline=""))}
    assert records["alpha"]["priced"] == "false"
    assert records["beta"]["priced"] == "true"


# The A100's two spellings: DCGM's modelName on rows of GPUs with telemetry, the node's
# nvidia.com/gpu.product label on rows of pods without it.
DCGM_A100 = "NVIDIA A100-SXM4-80GB"
LABEL_A100 = "NVIDIA-A100-SXM4-80GB"


def _spell_a100_both_ways(card_spelling: str) -> None:
    from ledger.models import HourlyRollup, RateCard

    rows = HourlyRollup.objects.filter(gpu_model="A100").order_by("hour", "pk")
    hours = sorted({row.hour for row in rows})
    for row in rows:
        row.gpu_model = DCGM_A100 if row.hour < hours[len(hours) // 2] else LABEL_A100
        row.save(update_fields=["gpu_model"])
    RateCard.objects.filter(gpu_model="A100").update(gpu_model=card_spelling)


@pytest.mark.parametrize("card_spelling", [DCGM_A100, LABEL_A100, "nvidia a100_sxm4_80gb"])
def test_a_gpu_model_card_prices_the_model_however_it_is_spelled(
    staff_client, scenario, card_spelling
):
    """Beta's A100 hours carry both spellings: every one is priced by the A100 card (2.00),
    not by the default card (1.00), in the chargeback and in the workload list's SQL price."""
    from ledger.chargeback.pricing import Pricer
    from ledger.choices import RateKind
    from ledger.models import HourlyRollup

    _spell_a100_both_ways(card_spelling)

    rows = by_group(get(staff_client, group_by="team").json())
    assert rows["beta"]["priced"] is True
    assert rows["beta"]["cost"]["total"] == BETA_USAGE_COST

    pricer = Pricer(START, END, "USD", "usage")
    prices = HourlyRollup.objects.filter(scope="team", key="beta").annotate(
        price=pricer.price_case(RateKind.ALLOCATED, None)
    )
    spellings = {(row.gpu_model, row.price) for row in prices}
    assert spellings == {(DCGM_A100, 2.0), (LABEL_A100, 2.0)}

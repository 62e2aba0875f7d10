"""GET /api/v1/allocation: OpenCost window forms, envelope, and agreement with /chargeback/."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from ledger.chargeback import ChargebackError
from ledger.opencost import parse_window
from tests.api.conftest import START

URL = "/api/v1/allocation"
PAIR = "2026-01-31T22:00:00Z,2026-02-01T02:00:00Z"
# Wednesday 2026-02-04 10:20 UTC.
NOW = datetime(2026, 2, 4, 10, 20, tzinfo=UTC)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("window", "start", "end"),
    [
        ("today", utc(2026, 2, 4), utc(2026, 2, 4, 11)),
        ("yesterday", utc(2026, 2, 3), utc(2026, 2, 4)),
        ("week", utc(2026, 2, 1), utc(2026, 2, 4, 11)),  # weeks start on Sunday
        ("lastweek", utc(2026, 1, 25), utc(2026, 2, 1)),
        ("month", utc(2026, 2, 1), utc(2026, 2, 4, 11)),
        ("lastmonth", utc(2026, 1, 1), utc(2026, 2, 1)),
        ("24h", utc(2026, 2, 3, 11), utc(2026, 2, 4, 11)),
        ("90m", utc(2026, 2, 4, 8), utc(2026, 2, 4, 11)),  # 08:51..10:21 widened to hours
        ("7d", utc(2026, 1, 29), utc(2026, 2, 4, 11)),
        ("30d", utc(2026, 1, 6), utc(2026, 2, 4, 11)),
        ("1w", utc(2026, 1, 29), utc(2026, 2, 4, 11)),
        (PAIR, utc(2026, 1, 31, 22), utc(2026, 2, 1, 2)),
        ("2026-02-01T01:00:00+02:00,2026-02-01T03:00:00+02:00", utc(2026, 1, 31, 23),
         utc(2026, 2, 1, 1)),
        ("1769896800,1769911200", utc(2026, 1, 31, 22), utc(2026, 2, 1, 2)),
        ("1769897400,1769900400", utc(2026, 1, 31, 22), utc(2026, 1, 31, 23)),  # 22:10..23:00
    ],
)  # fmt: skip
def test_every_opencost_window_form_parses(window, start, end):
    assert parse_window(window, NOW) == (start, end)


@pytest.mark.parametrize(
    ("window", "reason"),
    [
        ("", "required"),
        ("fortnight", "is not today"),
        ("0h", "not a duration"),
        ("2026-02-01T00:00:00,2026-02-02T00:00:00Z", "naive"),
        ("2026-02-02T00:00:00Z,2026-02-01T00:00:00Z", "end must be after"),
        ("a,b,c", "exactly two"),
        ("2027-01-01T00:00:00Z,2027-01-02T00:00:00Z", "future"),
        ("1000d", "longer than 400 days"),
    ],
)
def test_bad_windows_are_rejected(window, reason):
    with pytest.raises(ChargebackError) as caught:
        parse_window(window, NOW)

    assert caught.value.parameter == "window"
    assert reason in caught.value.reason


def allocation(client, **params):
    response = client.get(URL, {"window": PAIR, **params})
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize(
    ("aggregate", "group_by"),
    [
        ("namespace", "namespace"),
        ("team", "team"),
        ("clusterqueue", "cluster_queue"),
        ("localqueue", "local_queue"),
        ("cohort", "cohort"),
        ("workload", "workload"),
        ("pod", "workload"),
        ("cluster", "cluster"),
        ("node", "node"),
    ],
)
def test_allocation_matches_chargeback_for_the_same_window(
    staff_client, scenario, aggregate, group_by
):
    body = allocation(staff_client, aggregate=aggregate)
    charge = staff_client.get(
        "/api/v1/chargeback/",
        {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z", "group_by": group_by},
    ).json()

    assert body["code"] == 200
    assert body["status"] == "success"
    assert len(body["data"]) == 1
    allocations = body["data"][0]
    assert set(allocations) == {row["group"] for row in charge["rows"]}
    for row in charge["rows"]:
        item = allocations[row["group"]]
        assert item["name"] == row["group"]
        assert item["gpuHours"] == pytest.approx(row["allocated_gpu_hours"])
        assert item["gpuCost"] == row["cost"]["total"]
        assert item["totalCost"] == row["cost"]["total"]
        assert item["gpuLedger"]["active_gpu_hours"] == pytest.approx(row["active_gpu_hours"])
        assert item["gpuLedger"]["utilization"] == row["utilization"]


def test_an_allocation_has_the_opencost_fields(staff_client, scenario):
    item = allocation(staff_client, aggregate="namespace")["data"][0]["alpha-ns"]

    assert item["properties"] == {"namespace": "alpha-ns", "cluster": "test"}
    assert item["window"] == {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z"}
    assert item["start"] == "2026-01-31T22:00:00Z"
    assert item["minutes"] == 240
    assert item["gpuHours"] == 16
    assert item["gpuCount"] == 4  # 16 GPU-hours over 4 hours
    assert item["gpuRequestAverage"] == 4
    assert item["gpuUsageAverage"] == 1.5  # 6 active GPU-hours over 4 hours
    assert item["gpuEfficiency"] == pytest.approx(6 / 16)  # active / allocated
    assert item["gpuCost"] == 56


def test_step_gives_one_set_per_step_and_accumulate_sums_them(staff_client, scenario):
    stepped = allocation(staff_client, aggregate="namespace", step="2h")
    accumulated = allocation(staff_client, aggregate="namespace", step="2h", accumulate="true")

    assert len(stepped["data"]) == 2
    first, second = stepped["data"]
    assert first["alpha-ns"]["window"] == {
        "start": "2026-01-31T22:00:00Z",
        "end": "2026-02-01T00:00:00Z",
    }
    assert first["alpha-ns"]["gpuCost"] == 24
    assert second["alpha-ns"]["gpuCost"] == 32
    assert second["alpha-ns"]["gpuLedger"]["telemetry_coverage"] == 0.5
    assert len(accumulated["data"]) == 1
    assert accumulated["data"][0]["alpha-ns"]["gpuCost"] == 56


def test_day_steps_on_midnight_windows_use_calendar_days(staff_client, scenario):
    body = allocation(
        staff_client,
        window="2026-01-31T00:00:00Z,2026-02-02T00:00:00Z",
        aggregate="team",
        step="1d",
    )

    assert [s["alpha"]["start"] for s in body["data"]] == [
        "2026-01-31T00:00:00Z",
        "2026-02-01T00:00:00Z",
    ]
    # Each day: 8 GPU-hours in the scenario window, plus the scenario's 100 GPU-hour rows
    # at 21:00 on January 31st and 02:00 on February 1st.
    assert [s["alpha"]["gpuHours"] for s in body["data"]] == [108, 108]
    assert [s["alpha"]["gpuCount"] for s in body["data"]] == [4.5, 4.5]


def test_several_keys_join_names_with_a_slash(staff_client, scenario):
    body = allocation(staff_client, aggregate="namespace,team")

    allocations = body["data"][0]
    assert set(allocations) == {"alpha-ns/alpha", "beta-ns/beta"}
    assert allocations["alpha-ns/alpha"]["properties"]["team"] == "alpha"
    assert allocations["alpha-ns/alpha"]["gpuCost"] == 56
    assert allocations["beta-ns/beta"]["gpuHours"] == 8


def test_label_aggregation_reads_workload_labels(staff_client, scenario):
    allocations = allocation(staff_client, aggregate="label:app")["data"][0]

    assert set(allocations) == {"llm", "__unallocated__"}
    assert allocations["llm"]["properties"]["labels"] == {"app": "llm"}
    assert allocations["llm"]["gpuHours"] == 16


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"window": "soon"}, "window"),
        ({"aggregate": "planet"}, "aggregate"),
        ({"aggregate": "label:"}, "aggregate"),
        ({"aggregate": "node,namespace"}, "aggregate"),
        ({"aggregate": "team,team"}, "aggregate"),
        ({"step": "30m"}, "step"),
        ({"step": "often"}, "step"),
        ({"accumulate": "maybe"}, "accumulate"),
    ],
)
def test_bad_allocation_parameters_get_a_400(staff_client, scenario, params, parameter):
    response = staff_client.get(URL, {"window": PAIR, **params})

    assert response.status_code == 400
    assert parameter in response.json()


def test_relative_windows_are_relative_to_now(staff_client, scenario):
    # At 02:00 sharp the scenario's last hour (01:00) has just ended, so it counts
    # (tests/ledger/test_hour_coverage.py: the hour in progress does not).
    with time_machine.travel(datetime(2026, 2, 1, 2, 0, tzinfo=UTC), tick=False):
        body = allocation(staff_client, window="4h", aggregate="namespace")

    item = body["data"][0]["alpha-ns"]
    # 4h ending at the end of the current hour: 22:00 .. 02:00.
    assert item["start"] == "2026-01-31T22:00:00Z"
    assert item["gpuHours"] == 16
    assert START.hour == 22

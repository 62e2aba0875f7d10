"""``/api/v1/admissions/`` and ``/api/v1/queue-levels/``: hand-computed figures, visibility,
CSV and bad parameters."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from fleet.models import Cluster
from quotas.models import Team
from servicelevels.models import AdmissionRecord

T0 = datetime(2026, 11, 2, tzinfo=UTC)
RANGE = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-04T00:00:00Z"}


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def world(db):
    cluster = Cluster.objects.create(name="prod")
    vision = Team.objects.create(name="vision")
    speech = Team.objects.create(name="speech")

    def add(
        uid: str, team: Team, queue: str, queued: timedelta, admitted: timedelta | None, **extra
    ):
        return AdmissionRecord.objects.create(
            cluster=cluster,
            workload_uid=uid,
            namespace=team.name,
            workload_name=uid,
            cluster_queue_name=queue,
            local_queue_name="default",
            team=team,
            priority_class_name="normal",
            gpus=4.0,
            queued_at=T0 + queued,
            admitted_at=None if admitted is None else T0 + admitted,
            **extra,
        )

    # vision/batch, day 1: waits of 10, 20 and 60 minutes; day 2: one of 5 minutes.
    add("v1", vision, "batch", timedelta(hours=1), timedelta(hours=1, minutes=10))
    add("v2", vision, "batch", timedelta(hours=2), timedelta(hours=2, minutes=20))
    add(
        "v3",
        vision,
        "batch",
        timedelta(hours=3),
        timedelta(hours=4),
        running_at=T0 + timedelta(hours=4, minutes=2),
        evicted_at=T0 + timedelta(hours=6, minutes=2),
        eviction_reason="Preempted",
        preemption_reason="InCohortReclamation",
        preempting_cluster_queue_name="serving",
        preempted_by_path="speech/s1",
    )
    add(
        "v3",
        vision,
        "batch",
        timedelta(hours=6, minutes=2),
        timedelta(days=1, minutes=5),
        attempt=2,
    )
    # speech/serving: one admission after 2 minutes, one still waiting since day 2 at 12:00.
    add("s1", speech, "serving", timedelta(hours=6), timedelta(hours=6, minutes=2))
    add("s2", speech, "serving", timedelta(days=1, hours=12), None)
    lead = User.objects.create_user("lead", password="x")
    vision.leads.add(lead)
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    finance = User.objects.create_user("fin", password="x")
    finance.groups.add(Group.objects.get_or_create(name="finance")[0])
    return {"cluster": cluster, "lead": lead, "staff": staff, "finance": finance}


def test_admissions_lists_each_admission_in_the_range_with_its_waits(world):
    answer = client_for(world["staff"]).get("/api/v1/admissions/", RANGE)
    assert answer.status_code == 200, answer.content
    rows = answer.json()["results"]
    assert [(row["workload"], row["attempt"]) for row in rows] == [
        ("vision/v1", 1),
        ("vision/v2", 1),
        ("vision/v3", 1),
        ("speech/s1", 1),
        ("vision/v3", 2),
    ]
    first = rows[2]
    assert first["wait_seconds"] == 3600.0
    assert first["running_delay_seconds"] == 120.0
    assert first["eviction_reason"] == "Preempted"
    assert first["preempted_by"] == "speech/s1"
    assert first["local_queue"] == "vision/default"
    assert first["team"] == "vision"
    assert (
        rows[4]["wait_seconds"]
        == (timedelta(days=1, minutes=5) - timedelta(hours=6, minutes=2)).total_seconds()
    )


def test_admissions_filters_and_the_exclusive_start(world):
    staff = client_for(world["staff"])
    # v1 was admitted at 01:10: a range starting exactly then leaves it out (start is exclusive).
    rows = staff.get(
        "/api/v1/admissions/", {"start": "2026-11-02T01:10:00Z", "end": "2026-11-02T02:20:00Z"}
    ).json()["results"]
    assert [row["workload"] for row in rows] == ["vision/v2"]
    rows = staff.get("/api/v1/admissions/", {**RANGE, "workload": "vision/v3"}).json()["results"]
    assert [row["attempt"] for row in rows] == [1, 2]
    rows = staff.get("/api/v1/admissions/", {**RANGE, "cluster_queue": "serving"}).json()["results"]
    assert [row["workload"] for row in rows] == ["speech/s1"]


def test_a_lead_sees_only_their_teams_and_a_hidden_team_filters_to_nothing(world):
    lead = client_for(world["lead"])
    rows = lead.get("/api/v1/admissions/", RANGE).json()["results"]
    assert {row["team"] for row in rows} == {"vision"}
    hidden = lead.get("/api/v1/admissions/", {**RANGE, "team": "speech"})
    missing = lead.get("/api/v1/admissions/", {**RANGE, "team": "nobody"})
    assert hidden.status_code == missing.status_code == 200
    assert hidden.json()["results"] == missing.json()["results"] == []
    levels = lead.get("/api/v1/queue-levels/", RANGE).json()["rows"]
    assert [row["group"] for row in levels] == ["batch"]


def test_queue_levels_by_day_against_hand_computed_figures(world):
    answer = client_for(world["finance"]).get("/api/v1/queue-levels/", {**RANGE, "step": "day"})
    assert answer.status_code == 200, answer.content
    rows = {(row["group"], row["period_start"]): row for row in answer.json()["rows"]}
    day1 = rows[("batch", "2026-11-02T00:00:00Z")]
    # Waits 600, 1200, 3600 s: nearest rank p50 = rank 2, p90 = p95 = rank 3.
    assert day1["admissions"] == 3
    assert (day1["wait_seconds_p50"], day1["wait_seconds_p95"], day1["wait_seconds_max"]) == (
        1200.0,
        3600.0,
        3600.0,
    )
    assert day1["wait_seconds_mean"] == pytest.approx(1800.0)
    assert day1["evictions"] == {"Preempted": 1}
    assert day1["preemptions_by_reason"] == {"InCohortReclamation": 1}
    assert day1["preemptions_by_queue"] == {"serving": 1}
    # The run was Running from 04:02 to 06:02 on 4 GPUs.
    assert day1["preempted_gpu_hours"] == pytest.approx(8.0)
    # v3's second attempt was queued at 06:02 and admitted the next day: pending at the end.
    assert day1["pending_at_end"] == 1
    assert (
        day1["oldest_pending_seconds"]
        == (timedelta(days=1) - timedelta(hours=6, minutes=2)).total_seconds()
    )
    day2 = rows[("batch", "2026-11-03T00:00:00Z")]
    assert (day2["admissions"], day2["pending_at_end"]) == (1, 0)
    serving2 = rows[("serving", "2026-11-03T00:00:00Z")]
    assert (serving2["admissions"], serving2["pending_at_end"]) == (0, 1)
    assert serving2["oldest_pending_seconds"] == 12 * 3600.0
    assert serving2["source"] == "records"


def test_queue_levels_by_team_over_the_whole_range_and_as_csv(world):
    staff = client_for(world["staff"])
    rows = staff.get("/api/v1/queue-levels/", {**RANGE, "group_by": "team"}).json()["rows"]
    by_team = {row["group"]: row for row in rows}
    assert by_team["vision"]["admissions"] == 4
    assert by_team["speech"]["admissions"] == 1
    answer = staff.get("/api/v1/queue-levels/", {**RANGE, "group_by": "team", "format": "csv"})
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(b"".join(answer.streaming_content).decode())))
    vision = next(line for line in table if line["group"] == "vision")
    assert vision["admissions"] == "4"
    assert vision["evictions"] == "Preempted:1"
    assert vision["period_start"] == "2026-11-02T00:00:00Z"


def test_admissions_as_csv(world):
    answer = client_for(world["staff"]).get("/api/v1/admissions/", {**RANGE, "format": "csv"})
    assert answer.status_code == 200
    table = list(csv.DictReader(io.StringIO(b"".join(answer.streaming_content).decode())))
    assert len(table) == 5
    assert table[0]["workload"] == "vision/v1" and table[0]["wait_seconds"] == "600.0"


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({}, "start"),
        ({**RANGE, "start": "2026-11-02T00:00:00"}, "start"),
        ({**RANGE, "end": "2026-11-01T00:00:00Z"}, "end"),
        ({**RANGE, "end": "2028-01-01T00:00:00Z"}, "end"),
        ({**RANGE, "cluster": "elsewhere"}, "cluster"),
        ({**RANGE, "format": "xml"}, "format"),
        ({**RANGE, "group_by": "node"}, "group_by"),
        ({**RANGE, "step": "week"}, "step"),
        ({"start": "2026-10-01T00:00:00Z", "end": "2026-11-04T00:00:00Z", "step": "hour"}, "step"),
    ],
)
def test_bad_parameters_get_a_400_naming_the_parameter(world, params, name):
    answer = client_for(world["staff"]).get("/api/v1/queue-levels/", params)
    assert answer.status_code == 400, answer.content
    assert name in answer.json()


def test_a_malformed_workload_filter_is_a_400(world):
    answer = client_for(world["staff"]).get("/api/v1/admissions/", {**RANGE, "workload": "v3"})
    assert answer.status_code == 400
    assert "workload" in answer.json()


def test_both_endpoints_need_a_signed_in_user(world):
    assert APIClient().get("/api/v1/admissions/", RANGE).status_code in (401, 403)
    assert APIClient().get("/api/v1/queue-levels/", RANGE).status_code in (401, 403)


def test_queue_levels_rows_come_a_page_at_a_time_in_order(world):
    staff = client_for(world["staff"])
    whole = staff.get("/api/v1/queue-levels/", {**RANGE, "step": "hour"}).json()
    # Two queues x 48 hours, every period of every group.
    assert whole["count"] == 96 and len(whole["rows"]) == 96 and whole["next"] is None
    first = staff.get("/api/v1/queue-levels/", {**RANGE, "step": "hour", "limit": 50}).json()
    assert first["count"] == 96 and len(first["rows"]) == 50
    second = staff.get(first["next"]).json()
    assert len(second["rows"]) == 46 and second["next"] is None
    assert first["rows"] + second["rows"] == whole["rows"]
    keys = [(row["group"], row["period_start"]) for row in whole["rows"]]
    assert keys == sorted(keys)


def test_a_user_who_leads_no_team_gets_empty_answers_not_an_error(world):
    nobody = client_for(User.objects.create_user("nobody", password="x"))
    levels = nobody.get("/api/v1/queue-levels/", {**RANGE, "step": "day"})
    admissions = nobody.get("/api/v1/admissions/", RANGE)
    assert (levels.status_code, admissions.status_code) == (200, 200)
    assert levels.json()["rows"] == [] and admissions.json()["results"] == []

"""Admission records built by the Kueue sync: from the recorded Workloads of each eviction kind
(first sync: conditions), from a live sequence of WATCH events, idempotence and bad input.

Every expected time below is read off the fixture objects (tests/fixtures/kueue/README.md) or the
events the test sends, and every wait is computed by hand.
"""

from __future__ import annotations

import copy
import io
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from quotas.sync import sync_cluster
from servicelevels.build import BuildResult, Step, build_records, derive_attempts
from servicelevels.figures import levels
from servicelevels.models import AdmissionRecord
from tests.kueue_fixtures import fixture_items
from tests.quotas.conftest import while_watching

A1 = ("team-a", "job-llama-pretrain-8b-fbe70")
A3 = ("team-a", "job-llama-eval-70b-755d0")
A4 = ("team-a", "job-tokenizer-bench-22ed4")
A5 = ("team-a", "job-lr-sweep-17-62ba9")
B2 = ("team-b", "job-ddp-smoke-897b6")
C1 = ("team-c", "job-protein-fold-3c707")
C1_UID = "8c4c46c7-9b3b-598b-86ef-6d5a9e53d9b9"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def attempts(key: tuple[str, str]) -> list[AdmissionRecord]:
    return list(
        AdmissionRecord.objects.filter(namespace=key[0], workload_name=key[1]).order_by("attempt")
    )


def snapshot() -> list[tuple[Any, ...]]:
    return list(
        AdmissionRecord.objects.order_by("namespace", "workload_name", "attempt").values_list(
            "namespace",
            "workload_name",
            "attempt",
            "queued_at",
            "quota_reserved_at",
            "admitted_at",
            "running_at",
            "evicted_at",
            "eviction_reason",
            "preemption_reason",
            "preempted_by_path",
            "finished_at",
            "source",
            "updated_at",
        )
    )


def condition(kind: str, status: str, reason: str, when: str, message: str = "") -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": when,
        "observedGeneration": 1,
    }


def variant(name: str, conditions: list[dict], **status: Any) -> dict:
    """P2 (pending in batch, created 2026-08-22T11:30:01Z), renamed, with ``conditions``."""
    template = next(
        item
        for item in fixture_items("Workload")
        if item["metadata"]["name"] == "job-backfill-embeddings-48f3b"
    )
    item = copy.deepcopy(template)
    item["metadata"]["name"] = name
    item["metadata"]["uid"] = f"uid-{name}"
    item["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": f"job-{name}"}
    item["status"] = {"conditions": conditions, **status}
    return item


def run_sync(cluster: Any, django_capture_on_commit_callbacks: Any, **kwargs: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        sync_cluster(cluster.pk, **kwargs)


# --- the recorded fleet, first sync -------------------------------------------------------------


def test_first_sync_builds_one_record_per_attempt_from_the_conditions(
    kube_api, kube_cluster, django_capture_on_commit_callbacks
):
    run_sync(kube_cluster, django_capture_on_commit_callbacks)

    # 16 Workloads; A5 (preempted) and B2 (PodsReadyTimeout) are on their second attempt.
    assert AdmissionRecord.objects.count() == 18
    assert set(AdmissionRecord.objects.values_list("source", flat=True)) == {"conditions"}

    (a1,) = attempts(A1)
    assert (a1.queued_at, a1.admitted_at) == (
        at("2026-08-20T08:00:01Z"),
        at("2026-08-20T08:00:05Z"),
    )
    assert a1.wait_seconds == 4.0
    assert a1.running_at == at("2026-08-20T08:00:09Z")  # its pods' startTime
    assert a1.running_delay_seconds == 4.0
    assert a1.gpus == 8.0 and a1.cluster_queue_name == "team-a"
    assert a1.team is not None and a1.cohort_name == "research"
    assert a1.priority_class_name == "research-default"

    first, second = attempts(A5)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.queued_at == at("2026-08-21T14:00:01Z")
    assert first.admitted_at is None  # its admission is no longer in the conditions: not invented
    assert first.evicted_at == at("2026-08-22T06:00:11Z")
    assert (first.eviction_reason, first.preemption_reason) == ("Preempted", "InCohortReclamation")
    assert first.preempted_by is not None and first.preempted_by.uid == C1_UID
    assert first.preempted_by_path == "team-c/job-protein-fold-3c707"
    assert first.preempting_cluster_queue_name == "team-c"
    assert second.queued_at == at("2026-08-22T06:00:41Z")  # Requeued=True
    assert (second.admitted_at, second.evicted_at) == (None, None)

    first, second = attempts(B2)
    assert first.queued_at == at("2026-08-22T11:49:30Z")
    assert (first.evicted_at, first.eviction_reason) == (
        at("2026-08-22T11:59:30Z"),
        "PodsReadyTimeout",
    )
    assert first.preemption_reason == "" and first.preempted_by is None
    assert second.queued_at == at("2026-08-22T11:59:31Z")  # Requeued=False, in backoff

    (a4,) = attempts(A4)
    assert a4.finished_at == at("2026-08-20T21:10:45Z") and a4.wait_seconds == 0.0

    (c1,) = attempts(C1)
    assert c1.wait_seconds == 41.0  # 06:00:01 -> 06:00:42
    assert c1.running_at == at("2026-08-22T06:00:46Z")


def test_figures_from_the_first_sync_match_waits_computed_by_hand(
    kube_api, kube_cluster, django_capture_on_commit_callbacks
):
    run_sync(kube_cluster, django_capture_on_commit_callbacks)
    now = at("2026-08-22T12:00:00Z")

    rows = {row.group: row for row in levels(at("2026-08-22T00:00:00Z"), now)}
    team_a = rows["team-a"]
    assert team_a.admissions == 0
    # Pending at noon: A3 (since 09:15:01) and A5's second attempt (since 06:00:41).
    assert team_a.pending_at_end == 2
    assert team_a.oldest_pending_seconds == 5 * 3600 + 59 * 60 + 19
    assert team_a.evictions == {"Preempted": 1}
    assert team_a.preemptions_by_reason == {"InCohortReclamation": 1}
    assert team_a.preemptions_by_queue == {"team-c": 1}
    assert rows["team-b"].evictions == {"PodsReadyTimeout": 1}
    assert rows["team-c"].wait_seconds_max == 41.0

    whole = {row.group: row for row in levels(at("2026-08-17T00:00:00Z"), now)}
    serving = whole["serving"]
    # S1, S2 waited 2 s; S3a, S3b 1 s. Nearest rank of [1, 1, 2, 2]: p50 = rank 2, p90 = rank 4.
    assert serving.admissions == 4
    assert (serving.wait_seconds_p50, serving.wait_seconds_p90) == (1.0, 2.0)
    assert serving.wait_seconds_mean == 1.5


def test_a_second_sync_changes_nothing(kube_api, kube_cluster, django_capture_on_commit_callbacks):
    run_sync(kube_cluster, django_capture_on_commit_callbacks)
    before = snapshot()
    run_sync(kube_cluster, django_capture_on_commit_callbacks)
    assert snapshot() == before
    again = build_records(kube_cluster)
    assert (again.created, again.updated) == (0, 0)
    assert snapshot() == before


def test_the_command_builds_records_for_workloads_stored_before_them(kube_api, kube_cluster):
    sync_cluster(kube_cluster.pk)  # outside a commit hook: no records yet
    assert not AdmissionRecord.objects.exists()
    out = io.StringIO()
    call_command("build_admission_records", "--cluster", kube_cluster.name, stdout=out)
    assert "18 records created" in out.getvalue()
    (c1,) = attempts(C1)
    assert (c1.wait_seconds, c1.source) == (41.0, "conditions")
    with pytest.raises(CommandError):
        call_command("build_admission_records", "--cluster", "nowhere")


# --- each eviction kind, and what the conditions cannot say ---------------------------------------

KINDS = [
    variant(
        "deactivated",
        [
            condition("QuotaReserved", "False", "Pending", "2026-08-22T11:40:00Z"),
            condition("Evicted", "True", "Deactivated", "2026-08-22T11:40:00Z"),
            condition("Requeued", "False", "Deactivated", "2026-08-22T11:40:00Z"),
        ],
    ),
    variant(
        "cq-stopped",
        [
            condition("QuotaReserved", "False", "Pending", "2026-08-22T11:41:00Z"),
            condition("Evicted", "True", "ClusterQueueStopped", "2026-08-22T11:41:00Z"),
            condition("Requeued", "True", "ClusterQueueStopped", "2026-08-22T11:41:00Z"),
        ],
    ),
    variant(
        "lq-stopped",
        [
            condition("QuotaReserved", "False", "Pending", "2026-08-22T11:41:30Z"),
            condition("Evicted", "True", "LocalQueueStopped", "2026-08-22T11:41:30Z"),
            condition("Requeued", "True", "LocalQueueStopped", "2026-08-22T11:41:30Z"),
        ],
    ),
    variant(
        "admission-check",
        [
            condition("QuotaReserved", "False", "Pending", "2026-08-22T11:42:01Z"),
            condition("Evicted", "True", "AdmissionCheck", "2026-08-22T11:42:00Z"),
            condition("Requeued", "False", "AdmissionCheck", "2026-08-22T11:42:01Z"),
        ],
        requeueState={"count": 1, "requeueAt": "2026-08-22T11:43:01Z"},
        schedulingStats={
            "evictions": [{"reason": "AdmissionCheck", "underlyingCause": "", "count": 1}]
        },
    ),
    variant(
        "readmitted",
        [
            condition("QuotaReserved", "True", "QuotaReserved", "2026-08-22T11:50:00Z"),
            condition("Admitted", "True", "Admitted", "2026-08-22T11:50:00Z"),
            condition("Evicted", "False", "QuotaReserved", "2026-08-22T11:50:00Z"),
            condition("Requeued", "True", "BackoffFinished", "2026-08-22T11:45:30Z"),
        ],
        schedulingStats={
            "evictions": [
                {"reason": "Preempted", "underlyingCause": "", "count": 1},
                {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1},
            ]
        },
    ),
    variant(
        "requeue-unknown",
        [
            condition("QuotaReserved", "True", "QuotaReserved", "2026-08-22T11:55:00Z"),
            condition("Admitted", "True", "Admitted", "2026-08-22T11:55:00Z"),
            condition("Evicted", "False", "QuotaReserved", "2026-08-22T11:55:00Z"),
        ],
        schedulingStats={"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]},
    ),
    variant(
        "new-reason",
        [condition("Evicted", "True", "SomethingKueueAddsLater", "2026-08-22T11:44:00Z")],
    ),
    variant("no-conditions", []),
    variant(
        "no-times",
        [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "x"}],
    ),
]


def test_each_eviction_kind_from_the_conditions(
    kube_api, kube_cluster, django_capture_on_commit_callbacks, caplog
):
    for item in KINDS:
        kube_api.add("Workload", item)
    with caplog.at_level(logging.INFO, logger="servicelevels.build"):
        run_sync(kube_cluster, django_capture_on_commit_callbacks)
    created = at("2026-08-22T11:30:01Z")

    def one(name: str) -> list[AdmissionRecord]:
        return attempts(("ml-batch", name))

    (deactivated,) = one("deactivated")  # deactivated: waits for nothing, no next attempt
    assert (deactivated.queued_at, deactivated.evicted_at) == (created, at("2026-08-22T11:40:00Z"))
    assert deactivated.eviction_reason == "Deactivated"

    stopped, requeued = one("cq-stopped")
    assert stopped.eviction_reason == "ClusterQueueStopped"
    assert requeued.queued_at == at("2026-08-22T11:41:00Z")

    lq_stopped, _ = one("lq-stopped")
    assert lq_stopped.eviction_reason == "LocalQueueStopped"

    check, backoff = one("admission-check")
    assert (check.attempt, check.eviction_reason) == (1, "AdmissionCheck")
    assert backoff.queued_at == at("2026-08-22T11:42:01Z")

    # Two evictions counted, none visible: the record is attempt 3, queued at the requeue.
    (readmitted,) = one("readmitted")
    assert readmitted.attempt == 3
    assert readmitted.queued_at == at("2026-08-22T11:45:30Z")
    assert readmitted.wait_seconds == 270.0

    # One eviction counted, and no Requeued condition: the queued time is unknown: no record.
    assert one("requeue-unknown") == []
    assert any("requeue time is unknown" in r.getMessage() for r in caplog.records)

    (new_reason, after) = one("new-reason")
    assert new_reason.eviction_reason == "Other"
    assert after.queued_at == at("2026-08-22T11:44:00Z")
    assert any("SomethingKueueAddsLater" in r.getMessage() for r in caplog.records)

    (plain,) = one("no-conditions")
    assert (plain.queued_at, plain.quota_reserved_at) == (created, None)
    (untimed,) = one("no-times")  # a condition without its time is no transition
    assert untimed.quota_reserved_at is None

    noon = at("2026-08-22T12:00:00Z")
    (batch,) = [row for row in levels(noon - timedelta(hours=1), noon) if row.group == "batch"]
    assert batch.evictions == {
        "Deactivated": 1,
        "ClusterQueueStopped": 1,
        "LocalQueueStopped": 1,
        "AdmissionCheck": 1,
        "Other": 1,
    }
    assert (batch.admissions, batch.wait_seconds_max) == (1, 270.0)


# --- live: a sequence of WATCH events -------------------------------------------------------------


def _status(obj: dict, conditions: list[dict]) -> None:
    obj["status"]["conditions"] = conditions


@pytest.mark.django_db(transaction=True)
def test_a_live_sequence_of_watch_events_builds_each_attempt(kube_api, kube_cluster):
    admitted = "2026-08-22T12:01:00Z"
    preempted = "2026-08-22T12:10:00Z"
    readmitted = "2026-08-22T12:20:00Z"
    message = (
        "Preempted to accommodate a workload (UID: uid-A1, JobUID: job-A1) due to prioritization "
        "in the ClusterQueue; preemptor path: /team-a; preemptee path: /team-a"
    )
    steps = [
        [
            condition("QuotaReserved", "True", "QuotaReserved", admitted),
            condition("Admitted", "True", "Admitted", admitted),
        ],
        [
            condition("QuotaReserved", "False", "Pending", preempted),
            condition("Admitted", "False", "NoReservation", preempted),
            condition("Evicted", "True", "Preempted", preempted, message),
            condition("Preempted", "True", "InClusterQueue", preempted, message),
            condition("Requeued", "True", "Preempted", preempted),
        ],
        [
            condition("QuotaReserved", "True", "QuotaReserved", readmitted),
            condition("Admitted", "True", "Admitted", readmitted),
            condition("Evicted", "False", "QuotaReserved", readmitted),
            condition("Preempted", "False", "QuotaReserved", readmitted),
            condition("Requeued", "True", "Preempted", preempted),
        ],
    ]
    # The preemptor is A1: give it the UID the message names.
    kube_api.modify(
        "Workload", A1[1], lambda o: o["metadata"].update(uid="uid-A1"), namespace=A1[0]
    )

    def play() -> None:
        for conditions in steps:
            kube_api.modify(
                "Workload", A3[1], lambda o, c=conditions: _status(o, c), namespace=A3[0]
            )
            time.sleep(1.6)  # one WATCH batch per step

    thread = while_watching(kube_api, "Workload", play)
    sync_cluster(kube_cluster.pk, watch_seconds=6)
    thread.join()

    first, second = attempts(A3)
    assert first.source == "conditions"  # pending when the LIST saw it
    assert second.source == "live"
    assert first.queued_at == at("2026-08-22T09:15:01Z")
    assert first.admitted_at == at(admitted)
    assert first.wait_seconds == 2 * 3600 + 45 * 60 + 59.0
    assert (first.evicted_at, first.eviction_reason) == (at(preempted), "Preempted")
    assert first.preemption_reason == "InClusterQueue"
    assert first.preempted_by_path == "team-a/job-llama-pretrain-8b-fbe70"
    assert first.preempting_cluster_queue_name == "team-a"
    assert (second.queued_at, second.admitted_at) == (at(preempted), at(readmitted))
    assert second.wait_seconds == 600.0

    # A re-list of the same objects writes no duplicate and changes nothing.
    before = snapshot()
    sync_cluster(kube_cluster.pk)
    assert snapshot() == before


# --- the derivation on its own ------------------------------------------------------------------


def test_the_derivation_orders_same_instant_steps_and_skips_bad_ones():
    t0 = at("2026-08-22T10:00:00Z")
    steps = [
        Step("requeued", t0 + timedelta(minutes=12)),
        Step("evicted", t0 + timedelta(minutes=10), reason="Preempted"),
        Step("preempted", t0 + timedelta(minutes=10), reason="InCohortFairSharing"),
        Step("admitted", t0 + timedelta(minutes=5)),
        Step("quota_reserved", t0 + timedelta(minutes=5)),
        Step("quota_reserved", t0 + timedelta(minutes=20)),
        Step("admitted", t0 + timedelta(minutes=21)),
        Step("finished", t0 + timedelta(minutes=50)),
    ]
    runs = [
        (t0 + timedelta(minutes=6), t0 + timedelta(minutes=10)),
        (t0 + timedelta(minutes=22), None),
    ]
    result = BuildResult()
    one, two = derive_attempts(t0, steps, runs, result=result)
    assert one.admitted_at == one.queued_at + timedelta(minutes=5)
    assert (one.eviction_reason, one.preemption_reason) == ("Preempted", "InCohortFairSharing")
    assert one.running_at == t0 + timedelta(minutes=6)
    assert two.queued_at == t0 + timedelta(minutes=12)  # the requeue after the eviction
    assert two.quota_reserved_at == t0 + timedelta(minutes=20)
    assert two.admitted_at == t0 + timedelta(minutes=21)
    assert two.running_at == t0 + timedelta(minutes=22)
    assert two.finished_at == t0 + timedelta(minutes=50)
    assert result.skipped == 0
    assert derive_attempts(None, []) == []

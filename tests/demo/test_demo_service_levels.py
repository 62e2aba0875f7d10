"""The demo's queue service levels: waits, a preemption by another queue and a breached objective,
all from admission records the real sync write built from the simulated Kueue."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core.management import call_command

from servicelevels.figures import levels
from servicelevels.models import AdmissionRecord, QueueSLO

END = datetime.fromisoformat("2026-06-15T12:00:00+00:00")
START = END - timedelta(days=2)


@pytest.mark.django_db
def test_the_demo_has_waits_a_preemption_and_a_breached_objective(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "simulate", "--days", "2", "--step", "1800", "--seed", "3", "--end", END.isoformat()
        )

    # speech's job, preempted by vision's reclaim: two attempts, the first ended by vision.
    first, second = AdmissionRecord.objects.filter(
        workload_name__startswith="job-asr-finetune-xl"
    ).order_by("attempt")
    assert (first.eviction_reason, first.preemption_reason) == ("Preempted", "InCohortReclamation")
    assert first.cluster_queue_name == "speech"
    assert first.preempting_cluster_queue_name == "vision"
    assert first.preempted_by_path.split("/")[1].startswith("job-vit-huge-pretrain")
    assert first.evicted_at is not None and second.admitted_at is not None
    assert second.queued_at >= first.evicted_at

    # corpus-dedup arrives an hour after search-reindex took batch's A100 quota, and is admitted
    # when the re-index ends (its 6 hours after its own admission): a wait of hours.
    (reindex,) = AdmissionRecord.objects.filter(workload_name__startswith="job-search-reindex")
    (dedup,) = AdmissionRecord.objects.filter(workload_name__startswith="job-corpus-dedup")
    assert reindex.admitted_at is not None and dedup.admitted_at is not None
    assert dedup.admitted_at >= reindex.admitted_at + timedelta(hours=6)
    assert dedup.wait_seconds is not None and dedup.wait_seconds >= 4 * 3600

    # The objective on batch (p95 <= 30 min a day) is breached on the day of that wait and met
    # on a day whose admissions did not wait.
    slo = QueueSLO.objects.get(cluster_queue__name="batch")
    days = [r for r in levels(START, END, step="day") if r.group == "batch" and r.admissions]
    breached = [r for r in days if (r.wait_seconds_p95 or 0) > slo.max_wait_seconds]
    assert breached and breached[0].period_start <= dedup.admitted_at <= breached[0].period_end
    assert len(breached) < len(days)

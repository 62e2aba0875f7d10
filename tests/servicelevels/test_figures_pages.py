"""A slice of ``levels`` (a page of the API) reads only its own groups' records and gives exactly
the rows of the whole answer: every grouping, hours and days, pages that cut groups in two, and
records queued before the range and still pending across its periods."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from servicelevels import figures
from servicelevels.figures import GROUP_BY, levels
from servicelevels.models import AdmissionRecord

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
END = T0 + timedelta(days=2)
QUEUES = ("q-batch", "q-prod", "q-dev", "q-infer", "q-eval")


@pytest.fixture
def fleet(cluster):
    """Two clusters whose names sort opposite to their ids, teams likewise and records of no
    team, LocalQueues in two namespaces (some records without one), and 240 records: admitted in
    and around the range, evicted and preempted, pending from before the range through several
    periods, pending then finished or evicted, queued after the end."""
    from fleet.models import Cluster
    from quotas.models import Team

    other = Cluster.objects.create(name="a-cluster", display_name="A")
    teams = [Team.objects.create(name=name) for name in ("zeta", "alpha", "mid")] + [None]
    rng = random.Random(24)
    for n in range(240):
        home = (cluster, other)[n % 2]
        q = rng.randrange(len(QUEUES))
        queued = T0 + timedelta(minutes=rng.uniform(-8 * 60, 49 * 60))
        fields = {
            "cluster": home,
            "workload_uid": f"uid-{n}",
            "namespace": ("ns-b", "ns-a")[q % 2],
            "workload_name": f"job-{n}",
            "cluster_queue_name": QUEUES[q],
            "local_queue_name": "" if q == 4 else f"lq-{q % 3}",
            "team": teams[q % len(teams)],
            "cohort_name": ("", "research", "serving")[q % 3],
            "priority_class_name": ("", "low", "high")[n % 3],
            "gpus": float(rng.choice([1, 2, 8])),
            "queued_at": queued,
        }
        fate = rng.random()
        if fate < 0.15:  # still pending, possibly since before the range
            pass
        elif fate < 0.2:
            fields["finished_at"] = queued + timedelta(hours=rng.uniform(0, 30))
        elif fate < 0.25:
            fields["evicted_at"] = queued + timedelta(hours=rng.uniform(0, 30))
            fields["eviction_reason"] = "Deactivated"
        else:
            admitted = queued + timedelta(minutes=rng.lognormvariate(4.0, 1.5))
            fields["admitted_at"] = fields["quota_reserved_at"] = admitted
            if rng.random() < 0.8:
                fields["running_at"] = admitted + timedelta(seconds=rng.uniform(5, 600))
            if rng.random() < 0.3:
                fields["evicted_at"] = admitted + timedelta(hours=rng.uniform(0.2, 12))
                preempted = rng.random() < 0.7
                fields["eviction_reason"] = "Preempted" if preempted else "PodsReadyTimeout"
                if preempted:
                    fields["preemption_reason"] = "InCohortReclamation"
                    fields["preempting_cluster_queue_name"] = rng.choice(QUEUES)
        AdmissionRecord.objects.create(**fields)
    return {"teams": teams}


def _rows(rows):
    return [row.as_dict() for row in rows]


@pytest.mark.parametrize("group_by", GROUP_BY)
@pytest.mark.parametrize(("step", "limits"), [("day", (3, 7)), ("hour", (50, 97))])
def test_every_page_is_the_same_rows_of_the_whole_answer(fleet, group_by, step, limits):
    whole = _rows(levels(T0, END, group_by=group_by, step=step))
    groups = {(row["cluster"], row["group"]) for row in whole}
    assert len(groups) >= 3  # the pages below cut through several groups
    assert any(row["pending_at_end"] for row in whole)
    assert len(levels(T0, END, group_by=group_by, step=step)) == len(whole)
    for limit in limits:
        for offset in range(0, len(whole) + limit, limit):
            page = levels(T0, END, group_by=group_by, step=step)[offset : offset + limit]
            assert _rows(page) == whole[offset : offset + limit], (limit, offset)


def test_a_page_of_more_groups_than_a_restriction_takes_reads_all_and_keeps_its_own(
    fleet, monkeypatch
):
    whole = _rows(levels(T0, END, group_by="local_queue", step="day"))
    monkeypatch.setattr(figures, "RESTRICT_UP_TO", 2)
    for offset in range(0, len(whole), 5):  # three groups a page: every record is read
        page = levels(T0, END, group_by="local_queue", step="day")[offset : offset + 5]
        assert _rows(page) == whole[offset : offset + 5]


def test_pages_of_a_team_lead_hide_the_other_teams_queues_as_the_whole_answer_does(fleet):
    seen = [team.pk for team in fleet["teams"][:2]]
    whole = _rows(levels(T0, END, step="day", teams=seen))
    assert any(figures.HIDDEN_QUEUE in row["preemptions_by_queue"] for row in whole)
    for offset in range(0, len(whole), 5):
        page = levels(T0, END, step="day", teams=seen)[offset : offset + 5]
        assert _rows(page) == whole[offset : offset + 5]


def test_a_page_reads_the_records_of_its_own_groups_only(fleet, monkeypatch):
    real_read, read = figures._read, []

    def counting(queryset):
        rows = real_read(queryset)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(figures, "_read", counting)
    answer = levels(T0, END, step="day")
    first, _ = answer[0:2]  # the first group's two days
    (groups, records, evictions) = read
    assert groups == len({(row.cluster, row.group) for row in answer}) == len(answer) // 2
    own = figures.records(T0, END, cluster=first.cluster).filter(cluster_queue_name=first.group)
    assert records == own.count() < figures.records(T0, END).count()
    assert evictions == own.filter(evicted_at__gt=T0, evicted_at__lte=END).count()
    # The whole answer is read once, then kept.
    list(answer)
    list(answer)
    assert len(read) == 5


def test_one_row_by_position_and_an_empty_slice(fleet):
    whole = _rows(levels(T0, END, group_by="team", step="day"))
    answer = levels(T0, END, group_by="team", step="day")
    assert answer[-1].as_dict() == whole[-1]
    assert answer[len(whole) : len(whole) + 10] == []
    with pytest.raises(IndexError):
        answer[len(whole)]

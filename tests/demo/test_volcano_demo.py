"""The demo's second cluster runs Volcano: a Kueue cluster and a Volcano cluster simulated side by
side through the real ingest path (the Volcano one through the product's Volcano translation),
written once for the module, and the pages that show both in their own words.

Expected quotas are worked out by hand from the scenario's table
(``demo.simulation.scenario.TEAMS``: team -> flavor -> nominal, borrowing limit, lending limit):

=========  =========================  ==========  ================  ==================
queue      flavors (nominal/borrow/lend)  deserved    capability        guarantee
=========  =========================  ==========  ================  ==================
nlp        h100 40/24/16, a100 24/16/8     64      64+24+16 = 104    64-16-8 = 40
vision     h100 24/16/8,  a100 32/16/16    56      56+16+16 = 88     56-8-16 = 32
speech     h100 16/16/8,  a100 16/8/8      32      32+16+8 = 56      32-8-8 = 16
serving    h100 40/8/8,   a100 8/-/4       48      none (a100 has    48-8-4 = 36
                                                   no borrowing limit)
batch      h100 8/16/4,   a100 32/0/8      40      40+16+0 = 56      40-4-8 = 28
platform   a100 8/0/4                       8      8                 8-4 = 4
=========  =========================  ==========  ================  ==================

Parent queues: research = 64 + 56 + 32 = 152, prod = 48 + 40 + 8 = 96, root = 248.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db.models import Q
from django.test import TestCase
from django.urls import reverse

from alerts.choices import Rule
from alerts.models import Episode
from fleet.choices import IngestSource
from fleet.models import Cluster, IngestRun
from ledger.models import GpuUsage
from quotas.choices import WorkloadState
from quotas.models import ClusterQueue, Cohort, Workload
from quotas.now import gpu_quotas, nominal_gpus
from tests.databases import kept_for_the_module

END = datetime.fromisoformat("2026-06-15T12:00:00+00:00")
ARGS = ("--days", "1", "--step", "3600", "--end", END.isoformat())

DESERVED = {"nlp": 64, "vision": 56, "speech": 32, "serving": 48, "batch": 40, "platform": 8}
CAPABILITY = {"nlp": 104, "vision": 88, "speech": 56, "serving": None, "batch": 56, "platform": 8}
GUARANTEE = {"nlp": 40, "vision": 32, "speech": 16, "serving": 36, "batch": 28, "platform": 4}

pytestmark = pytest.mark.django_db


def simulate_volcano(*extra: str) -> None:
    """The Volcano cluster, one day of hourly windows (seed 4)."""
    volcano_args = ("--seed", "4", "--cluster", "demo-volcano", "--scheduler", "volcano")
    call_command("simulate", *ARGS, *volcano_args, *extra, verbosity=0)


@pytest.fixture(scope="module", autouse=True)
def world(django_db_setup, django_db_blocker):
    with kept_for_the_module(django_db_blocker):
        with TestCase.captureOnCommitCallbacks(execute=True):
            call_command("simulate", *ARGS, "--seed", "3", verbosity=0)
            simulate_volcano()
        yield


def volcano() -> Cluster:
    return Cluster.objects.get(name="demo-volcano")


def test_the_volcano_cluster_is_read_as_volcano_with_its_queues_quotas():
    cluster = volcano()
    assert cluster.quota_source == "volcano"
    queues = {q.name: q for q in ClusterQueue.objects.filter(cluster=cluster)}
    assert set(queues) == set(DESERVED)
    assert {q.scheduler for q in queues.values()} == {"volcano"}
    quotas = gpu_quotas(Q(cluster_queue__cluster=cluster))
    for name, queue in queues.items():
        rows = quotas[queue.pk]
        assert nominal_gpus(rows) == DESERVED[name], name
        (row,) = rows
        ceiling = None if row.borrowing_limit is None else row.nominal + row.borrowing_limit
        assert ceiling == (None if CAPABILITY[name] is None else Decimal(CAPABILITY[name])), name
        assert row.nominal - row.lending_limit == GUARANTEE[name], name

    cohorts = {c.name: c for c in Cohort.objects.filter(cluster=cluster)}
    assert set(cohorts) == {"root", "research", "prod"}
    assert {c.scheduler for c in cohorts.values()} == {"volcano"}
    assert cohorts["research"].parent_name == "root"
    assert {q.name for q in queues.values() if q.cohort_id == cohorts["prod"].pk} == {
        "serving",
        "batch",
        "platform",
    }
    # The Kueue cluster beside it is untouched.
    kueue = ClusterQueue.objects.filter(cluster__name="demo")
    assert kueue.count() == 6 and not kueue.exclude(scheduler="kueue").exists()


def test_pod_groups_become_workloads_with_their_pods_and_nothing_is_skipped():
    cluster = volcano()
    runs = IngestRun.objects.filter(cluster=cluster, source=IngestSource.SIMULATION)
    # A bare pod's PodGroup ("podgroup-<pod uid>") is named after its pod: no two collide.
    assert runs.exists() and [run.skipped for run in runs] == [0] * runs.count()
    workloads = Workload.objects.filter(cluster=cluster)
    assert {w.scheduler for w in workloads} == {"volcano"}
    assert workloads.filter(name="notebook-dana-0", owner_kind="Pod").exists()
    # A Volcano Job's PodGroup name without its job uid.
    assert not workloads.filter(name__regex=r"-[0-9a-f]{8}-[0-9a-f]{4}-").exists()
    # Usage rows join the PodGroup's workload through the pods' group-name annotation.
    running = workloads.filter(state=WorkloadState.ADMITTED).exclude(name="backfill-embeddings")
    joined = GpuUsage.objects.filter(workload__in=running, allocated=True)
    assert joined.values("workload").distinct().count() == running.count()


def test_an_inqueue_pod_group_without_pods_is_a_ghost_reservation():
    ghost = Workload.objects.get(cluster=volcano(), name="backfill-embeddings")
    # Admitted 70 minutes before the end, its pods never start: Volcano shows it Inqueue.
    assert ghost.state == WorkloadState.QUOTA_RESERVED
    episode = Episode.objects.get(rule=Rule.GHOST_RESERVATION, workload=ghost)
    assert episode.cluster_queue.name == "platform"
    assert episode.gpus == 4
    # Named as Volcano names it; the Kueue cluster's ghost stays a Workload.
    assert episode.summary.startswith("PodGroup platform/backfill-embeddings holds 4 GPUs")
    kueue = Episode.objects.get(rule=Rule.GHOST_RESERVATION, cluster__name="demo")
    assert kueue.summary.startswith("Workload platform/")


def test_the_queue_list_names_each_row_as_its_scheduler_does(admin_client):
    page = admin_client.get(reverse("dashboard:cluster-queue-list"))
    assert page.context["page_title"] == "Queues" and page.context["page_words"].mixed
    rows = {(row["queue"].cluster.name, row["queue"].name): row for row in page.context["rows"]}
    speech = rows[("demo-volcano", "speech")]
    assert speech["words"].queue_kind == "Volcano Queue"
    assert [q["text"] for q in speech["quotas"]] == ["deserved 32 · capability 56"]
    assert [q["text"] for q in rows[("demo-volcano", "serving")]["quotas"]] == [
        "deserved 48 · no capability"
    ]
    assert rows[("demo", "speech")]["words"].queue_kind == "Kueue ClusterQueue"
    assert [q["text"] for q in rows[("demo", "speech")]["quotas"]] == [
        "h100 16 / 16",
        "a100 16 / 8",
    ]
    html = page.content.decode()
    assert "Volcano Queue" in html and "Kueue ClusterQueue" in html
    # The subtitle names the kinds present, the headings the neutral words.
    assert "(Kueue ClusterQueues and Volcano Queues)" in html
    assert "<th>Queue</th>" in html and "<th>Cohort / parent queue</th>" in html


def test_a_volcano_queue_page_shows_deserved_capability_and_guarantee(admin_client):
    url = reverse("dashboard:cluster-queue-detail", args=["demo-volcano", "speech"])
    page = admin_client.get(url)
    assert page.context["page_title"] == "Queue speech"
    (row,) = page.context["quota_rows"]
    assert (row["nominal"], row["ceiling"], row["kept"]) == ("32", "56", "16")
    assert dict(page.context["scheduler_fields"]) == {"state": "Open", "weight": "1"}
    html = page.content.decode()
    assert "Pending PodGroups" in html and "parent queue" in html
    assert "reclaimWithinCohort" not in html

    kueue = admin_client.get(reverse("dashboard:cluster-queue-detail", args=["demo", "speech"]))
    assert kueue.context["page_title"] == "ClusterQueue speech"
    assert "reclaimWithinCohort" in kueue.content.decode()


def test_a_parent_queue_page_speaks_volcano_and_sums_its_children(admin_client):
    page = admin_client.get(reverse("dashboard:cohort-detail", args=["demo-volcano", "research"]))
    assert page.context["page_title"] == "Parent queue research"
    stats = {card["label"]: card for card in page.context["stats"]}
    assert stats["Members"]["unit"] == "Queues"
    assert stats["Nominal quota"]["value"] == "152"
    assert stats["Members"]["note"] == "parent queue root"
    html = page.content.decode()
    assert 'data-testid="reclaim-elsewhere"' in html and "Cannot reclaim" not in html


def test_a_pod_group_page_says_what_it_is(admin_client):
    ghost = Workload.objects.get(cluster=volcano(), name="backfill-embeddings")
    page = admin_client.get(reverse("dashboard:workload-detail", args=[ghost.pk]))
    html = page.content.decode()
    assert "Volcano PodGroup on" in html
    assert page.context["words"].workload == "PodGroup"


def test_re_simulating_the_volcano_cluster_with_reset_writes_the_same_tables():
    before = (
        Workload.objects.filter(cluster=volcano()).count(),
        GpuUsage.objects.filter(cluster=volcano()).count(),
    )
    simulate_volcano("--reset")
    after = (
        Workload.objects.filter(cluster=volcano()).count(),
        GpuUsage.objects.filter(cluster=volcano()).count(),
    )
    assert after == before


def test_a_cluster_cannot_change_scheduler_under_the_simulation():
    with pytest.raises(Exception, match="reads volcano, not kueue"):
        call_command("simulate", *ARGS, "--cluster", "demo-volcano", verbosity=0)


def test_the_cohort_list_names_parent_queues_and_sums_their_subtrees(admin_client):
    page = admin_client.get(reverse("dashboard:cohort-list"))
    assert page.context["page_words"].mixed
    rows = {(row["cohort"].cluster.name, row["cohort"].name): row for row in page.context["rows"]}
    root = rows[("demo-volcano", "root")]
    assert root["words"].cohort_kind == "Volcano parent queue"
    # root holds both parent queues: 152 + 96, with no own pool above them.
    assert root["nominal"] == "248" and root["cohort"].members == 6
    assert rows[("demo", "research")]["words"].cohort_kind == "Kueue Cohort"
    assert "Kueue Cohorts and Volcano parent queues: queues that lend" in page.content.decode()

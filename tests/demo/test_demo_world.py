"""The simulated fleet (``tests.demo.world``), written once for the module through the real ingest
path and rolled back after it: every scenario element reaches the tables, the inference
deployments show their knee and an open over-provisioned episode, the queues their waits, a
preemption and a breached objective, and a re-run with ``--reset`` writes the same tables.

The serving bounds are worked out from the load model in ``demo/simulation/serving.py``."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.db.models import Sum

from alerts.choices import Rule
from alerts.models import Episode
from core.timewindows import floor_time
from fleet.choices import ActivitySource, IngestSource, IngestStatus
from fleet.models import Gpu, IngestRun, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from quotas.choices import SampleSource, TransitionKind, WorkloadState
from quotas.models import Allocation, ClusterQueue, ClusterQueueSample, Team, Workload
from quotas.pending import short_reason
from servicelevels.figures import levels
from servicelevels.models import AdmissionRecord, QueueSLO
from serving.knee import OUTPUT_TOKENS, knee
from serving.models import ServingHour, ServingWorkload
from tests.databases import kept_for_the_module
from tests.demo.world import DAYS, END, INSTALL, START, simulate_world, table_figures

DAY = timedelta(days=1)
CAPACITY = 2400.0  # vllm-llama-8b's output tokens/s per replica at most
# Waiting per replica is 40 (ρ - 0.9) above 0.9: at most 0.1 (the knee's limit) up to ρ 0.9025.
KNEE_HIGHEST = 0.9025 * CAPACITY
# Its quietest hour offers 1.5 x 0.47 x capacity, less 4 % noise: every hour qualifies up to there.
KNEE_LOWEST = 1.5 * 0.47 * 0.96 * CAPACITY

# Kueue's message for a workload its queue's quota cannot admit yet.
SHORTFALL = re.compile(
    r"insufficient unused quota for nvidia\.com/gpu in flavor (?P<flavor>\S+), "
    r"(?P<more>\d+) more needed$"
)

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module", autouse=True)
def world(django_db_setup, django_db_blocker):
    with kept_for_the_module(django_db_blocker):
        simulate_world()
        yield


def test_the_inventory_has_every_kind_of_gpu():
    # 32 nodes, MIG instances, one time-sliced GPU, six teams and queues.
    assert Node.objects.count() == 32
    assert Gpu.objects.exclude(gi_id="").filter(mig_profile="3g.40gb").exists()
    assert Gpu.objects.filter(time_sliced=True).count() == 1
    assert Team.objects.count() == 6
    assert ClusterQueue.objects.filter(cohort__name="research").count() == 3


def test_usage_shows_shared_dark_and_fallback_telemetry():
    # Time-sliced rows are flagged shared and split the GPU between two pods.
    shared = GpuUsage.objects.filter(shared=True)
    assert shared.exists()
    assert {round(g, 6) for g in shared.values_list("gpus", flat=True)} == {0.5}

    # The node whose exporter stopped: allocated GPUs with no telemetry, never idle.
    dark = GpuUsage.objects.filter(node_name="gpu-node-h100-01", window_end__gt=END.replace(hour=0))
    assert dark.filter(allocated=True, gpu_key="", activity__isnull=True).exists()
    assert not dark.exclude(gpu_key="").exists()

    # A100 nodes that export no SM_ACTIVE fall back to GR_ENGINE_ACTIVE.
    assert GpuUsage.objects.filter(activity_source=ActivitySource.GR_ENGINE_ACTIVE).exists()


def test_borrowing_preemption_and_a_ghost_reservation_reach_the_tables():
    # nlp's large gang borrowed above quota for hours.
    nlp = HourlyRollup.objects.filter(scope=RollupScope.TEAM, key="nlp")
    assert nlp.aggregate(b=Sum("borrowed_gpu_hours"))["b"] > 1

    # speech was preempted by vision's reclaim, then re-admitted.
    speech = Workload.objects.get(name__startswith="job-asr-finetune-xl")
    kinds = list(speech.transitions.order_by("at").values_list("kind", flat=True))
    assert TransitionKind.PREEMPTED in kinds
    evicted_at = speech.transitions.get(kind=TransitionKind.EVICTED).at
    assert speech.transitions.filter(kind=TransitionKind.ADMITTED, at__gt=evicted_at).exists()
    preemption = speech.transitions.get(kind=TransitionKind.PREEMPTED)
    assert preemption.preemptor is not None
    assert preemption.preemptor.name.startswith("job-vit-huge-pretrain")
    # The job controller re-created its pods after the eviction: new pods, the old ones ended.
    pods = Allocation.objects.filter(workload=speech)
    assert pods.values("pod").distinct().count() == 6
    assert pods.filter(ended_at__lte=evicted_at + timedelta(hours=1)).count() == 3

    # The ghost reservation holds quota with no pods.
    ghost = Workload.objects.get(name__startswith="job-backfill-embeddings")
    assert ghost.state == WorkloadState.ADMITTED
    assert not Allocation.objects.filter(workload=ghost).exists()


def test_the_idle_notebook_and_busy_serving_are_rolled_up_and_priced():
    # The idle notebook: allocated and idle for all of its telemetry hours.
    notebook = HourlyRollup.objects.filter(
        scope=RollupScope.WORKLOAD, key__contains="notebook-dana-0"
    )
    totals = notebook.aggregate(a=Sum("allocated_gpu_hours"), i=Sum("idle_gpu_hours"))
    assert totals["a"] > 1
    assert totals["i"] == pytest.approx(totals["a"])

    # Serving is busy but not working: GPU_UTIL high, SM_ACTIVE low.
    serving = HourlyRollup.objects.filter(scope=RollupScope.TEAM, key="serving")
    assert serving.aggregate(b=Sum("busy_not_working_gpu_hours"))["b"] > 1

    # Team rows add up to the fleet.
    fleet = HourlyRollup.objects.filter(scope=RollupScope.FLEET).aggregate(
        a=Sum("allocated_gpu_hours")
    )["a"]
    teams = HourlyRollup.objects.filter(scope=RollupScope.TEAM).aggregate(
        a=Sum("allocated_gpu_hours")
    )["a"]
    assert teams == pytest.approx(fleet)

    run = IngestRun.objects.get(source=IngestSource.SIMULATION)
    assert run.status == IngestStatus.SUCCESS
    assert run.rows_written > 0

    # The idle notebook's alert is priced: the demo's rate cards are in force when the
    # simulated history is evaluated (every demo flavor costs at least 0.70 per GPU-hour).
    episode = Episode.objects.get(rule="idle_workload", workload__name__contains="notebook-dana-0")
    assert episode.idle_gpu_hours > 0
    assert episode.cost >= Decimal("0.70") * Decimal(str(episode.idle_gpu_hours)) * Decimal("0.99")


def test_every_waiting_workload_has_its_place_in_its_queue():
    # Kueue's visibility API, read as the sync reads it: every waiting workload has its place,
    # numbered from 0 in each ClusterQueue by priority, then age (no "≈" estimates in the demo).
    waiting = Workload.objects.pending().select_related("cluster_queue")
    assert waiting.exists()
    assert not waiting.filter(pending_position__isnull=True).exists()
    by_queue: dict[int | None, list[Workload]] = {}
    for workload in waiting:
        by_queue.setdefault(workload.cluster_queue_id, []).append(workload)
    for queue in by_queue.values():
        queue.sort(key=lambda w: (-w.priority, w.observed_at, w.name))
        assert [w.pending_position for w in queue] == list(range(len(queue)))
    assert any(len(queue) > 1 for queue in by_queue.values())
    # Their messages are Kueue's own ("…, N more needed"), so pages can say them short.
    for queue in by_queue.values():
        head = queue[0]
        shortfall = SHORTFALL.search(head.state_message)
        assert shortfall is not None and int(shortfall["more"]) > 0, head.state_message
        assert short_reason(head.state_message, head.requested_gpus, {}).startswith(
            f"needs {head.requested_gpus:g} nvidia.com/gpu on {shortfall['flavor']}: "
        )


def test_quota_history_before_the_simulated_install_comes_from_kueue_metrics():
    samples = ClusterQueueSample.objects.all()
    assert samples.filter(sampled_at__lt=INSTALL).exists()
    assert not samples.filter(sampled_at__lt=INSTALL, source=SampleSource.API).exists()
    assert not samples.filter(sampled_at__gte=INSTALL, source=SampleSource.METRICS).exists()
    # Borrowing shows in the hours only Kueue's metrics describe.
    early = HourlyRollup.objects.filter(scope=RollupScope.CLUSTER_QUEUE, hour__lt=INSTALL)
    assert early.aggregate(total=Sum("nominal_gpu_hours"))["total"] > 0


def test_the_same_seed_from_scratch_writes_the_same_tables():
    # The simulator rewinds time, so a re-run over stored history needs --reset, as `make demo`
    # does; the re-run is undone with the test.
    before = table_figures()
    simulate_world("--reset")
    assert table_figures() == before


def test_the_queues_have_waits_a_preemption_and_a_breached_objective():
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


def known(value: float | None) -> float:
    assert value is not None, "a figure the simulation always sends is missing"
    return value


def hours_of(name: str) -> list[ServingHour]:
    workload = ServingWorkload.objects.get(namespace="ml-serving", kind="Deployment", name=name)
    return list(workload.hours.order_by("hour"))


def test_vllm_llama_8b_shows_its_knee():
    hours = hours_of("vllm-llama-8b")
    assert len(hours) == DAYS * 24  # an hour collected at the end of every simulated hour
    per_replica = [known(h.output_tokens_per_second) / h.replica_hours for h in hours]
    # Throughput per replica plateaus at the capacity through the afternoons.
    assert max(per_replica) == pytest.approx(CAPACITY)
    assert sum(value == pytest.approx(CAPACITY) for value in per_replica) >= 4

    found = knee(hours, ServingWorkload.objects.get(name="vllm-llama-8b").targets())
    assert found is not None and found.unit == OUTPUT_TOKENS
    assert KNEE_LOWEST <= found.per_replica <= KNEE_HIGHEST
    at_knee = next(h for h in hours if h.hour == found.hour)
    assert at_knee.mean_waiting == 0.0
    # Above the knee requests queue and the time to first token climbs past the 2 s target.
    above = [h for h, value in zip(hours, per_replica, strict=True) if value > found.per_replica]
    assert above
    assert all(known(h.mean_waiting) / h.replica_hours > 0.1 for h in above)
    knee_ttft = known(at_knee.ttft_p95_seconds)
    assert all(known(h.ttft_p95_seconds) > knee_ttft for h in above)
    assert max(known(h.ttft_p95_seconds) for h in above) > 2.0
    assert not Episode.objects.filter(serving_workload__name="vllm-llama-8b").exists()


def test_vllm_qwen_chat_has_an_open_over_provisioned_episode():
    hours = hours_of("vllm-qwen-chat")
    assert {h.replicas_seen for h in hours} == {4}
    # Its GPUs join: 4 H100s held every hour, seen by DCGM as the serving team's.
    assert {h.gpu_hours for h in hours} == {4.0}
    usage = GpuUsage.objects.filter(namespace="ml-serving", pod__startswith="vllm-qwen-chat-")
    assert usage.filter(allocated=True, flavor="h100").values("pod").distinct().count() == 4

    episode = Episode.objects.get(rule=Rule.SERVING_OVERPROVISIONED)
    assert str(episode.serving_workload) == "ml-serving/Deployment/vllm-qwen-chat"
    # Every day from the first (partial: from START's hour) to the last complete one counts;
    # the rule's count of them fired it, and the day after it kept it open.
    assert episode.started_at == floor_time(START, 86400)
    assert episode.fired_at == episode.started_at + settings.GPULEDGER_ALERT_SERVING_DAYS * DAY
    assert episode.fired_at < floor_time(END, 86400)
    assert episode.resolved_at is None
    assert episode.gpus == 4 and str(episode.team) == "serving"
    # The peak offers 900 tokens/s per replica (3600 over 4) at 10:00, ± 4 %.
    assert 0.96 * 896 <= episode.evidence["knee_per_replica"] <= 1.04 * 900
    assert episode.evidence["share_below"] > 0.5
    assert episode.cost > 0

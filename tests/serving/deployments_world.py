"""A small serving fleet whose figures are worked out by hand in the tests that use it.

Cluster ``east``: team aspen owns namespace ``chat`` (TeamNamespace), team birch ``search``.

- ``chat/llama`` (Deployment, aspen): five hours H0-H4, two replicas and two GPUs each hour.
  Output tokens/s 1600, 600, 500, 2000, 400 (per replica 800, 300, 250, 1000, 200); H3 misses
  the 2 s TTFT target (3 s) and queues, so the knee is H0's 800 tokens/s per replica with 8
  running (4 per replica). Namespace ``chat`` DCGM rollups: H0-H3 hold 2 GPU-hours (joined),
  H4 holds 3 (a training job beside it: not joined). Rate card h100: 3.60 per GPU-hour.
- ``chat/quiet`` (Deployment, aspen): one hour, H0, with replicas and nothing else measured.
- ``search/ranker`` (Deployment, birch): Triton, requests only, two hours.
- ``west/chat/llama``: the same namespace and name in cluster ``west``, no hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.models import User

from fleet.models import Cluster
from ledger.choices import RateKind, RollupScope
from ledger.models import HourlyRollup, RateCard
from quotas.models import ResourceFlavor, Team, TeamNamespace
from serving.models import ServingHour, ServingWorkload

H0 = datetime(2026, 11, 9, 8, tzinfo=UTC)
HOURS = [H0 + timedelta(hours=n) for n in range(5)]
# The clock: H4 ended 20 minutes ago, so a range from H0 counts H0-H4.
NOW = H0 + timedelta(hours=5, minutes=20)
RANGE = {"start": "2026-11-09T08:00", "end": "2026-11-09T13:20"}

# (output tokens/s, requests/s, running, waiting, kv mean, kv max, ttft p95, itl p95)
LLAMA = [
    (1600.0, 4.0, 8.0, 0.0, 0.6, 0.9, 0.5, 0.05),
    (600.0, 1.5, 2.0, 0.0, 0.2, 0.4, 0.3, 0.04),
    (500.0, 1.25, 2.0, 0.0, 0.2, 0.3, 0.3, 0.04),
    (2000.0, 5.0, 12.0, 4.0, 0.95, 1.0, 3.0, 0.09),
    (400.0, 1.0, 2.0, 0.0, 0.3, 0.5, 0.3, 0.04),
]
# Namespace chat per hour: (allocated, telemetry, active) GPU-hours.
CHAT_DCGM = [(2.0, 2.0, 1.6), (2.0, 2.0, 0.8), (2.0, 2.0, 0.6), (2.0, 2.0, 1.9), (3.0, 3.0, 0.3)]


@dataclass
class World:
    east: Cluster
    west: Cluster
    aspen: Team
    birch: Team
    llama: ServingWorkload
    quiet: ServingWorkload
    ranker: ServingWorkload
    west_llama: ServingWorkload
    alice: User
    bob: User


def _hour(workload: ServingWorkload, hour: datetime, **figures) -> ServingHour:
    return ServingHour(
        workload=workload,
        cluster=workload.cluster,
        hour=hour,
        server_kind=figures.pop("server_kind", "vllm"),
        replicas_seen=figures.pop("replicas_seen", 2),
        replica_hours=figures.pop("replica_hours", 2.0),
        seconds_with_data=3600,
        **figures,
    )


def build_world() -> World:
    east = Cluster.objects.create(name="east", display_name="East")
    west = Cluster.objects.create(name="west", display_name="West")
    aspen = Team.objects.create(name="aspen")
    birch = Team.objects.create(name="birch")
    alice = User.objects.create_user("alice", password="alice-password")
    bob = User.objects.create_user("bob", password="bob-password")
    aspen.leads.add(alice)
    birch.leads.add(bob)
    TeamNamespace.objects.create(team=aspen, cluster=east, namespace="chat")
    TeamNamespace.objects.create(team=aspen, cluster=west, namespace="chat")
    TeamNamespace.objects.create(team=birch, cluster=east, namespace="search")
    ResourceFlavor.objects.create(cluster=east, name="h100", gpu_model="H100")

    def deployment(cluster: Cluster, namespace: str, name: str) -> ServingWorkload:
        return ServingWorkload.objects.create(
            cluster=cluster, namespace=namespace, kind="Deployment", name=name
        )

    llama = deployment(east, "chat", "llama")
    quiet = deployment(east, "chat", "quiet")
    ranker = deployment(east, "search", "ranker")
    west_llama = deployment(west, "chat", "llama")
    rows = [
        _hour(
            llama,
            hour,
            gpu_hours=2.0,
            output_tokens_per_second=tokens,
            prompt_tokens_per_second=tokens * 2,
            requests_per_second=requests,
            mean_running=running,
            mean_waiting=waiting,
            kv_cache_mean=kv_mean,
            kv_cache_max=kv_max,
            ttft_p50_seconds=ttft / 2,
            ttft_p95_seconds=ttft,
            itl_p50_seconds=itl / 2,
            itl_p95_seconds=itl,
            e2e_p95_seconds=10.0,
        )
        for hour, (tokens, requests, running, waiting, kv_mean, kv_max, ttft, itl) in zip(
            HOURS, LLAMA, strict=True
        )
    ]
    rows.append(_hour(quiet, H0, replicas_seen=1, replica_hours=1.0))
    rows += [
        _hour(
            ranker,
            hour,
            server_kind="triton",
            gpu_hours=1.0,
            replica_hours=1.0,
            replicas_seen=1,
            requests_per_second=20.0,
            mean_running=1.0,
            mean_waiting=0.0,
            ttft_p95_seconds=0.2,
        )
        for hour in HOURS[:2]
    ]
    ServingHour.objects.bulk_create(rows)
    HourlyRollup.objects.bulk_create(
        HourlyRollup(
            cluster=east,
            scope=RollupScope.NAMESPACE,
            key="chat",
            hour=hour,
            flavor="h100",
            gpu_model="H100",
            windows=60,
            allocated_gpu_hours=allocated,
            telemetry_gpu_hours=telemetry,
            active_gpu_hours=active,
        )
        for hour, (allocated, telemetry, active) in zip(HOURS, CHAT_DCGM, strict=True)
    )
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=Decimal("3.60"),
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
    )
    return World(east, west, aspen, birch, llama, quiet, ranker, west_llama, alice, bob)


def add_deployments(cluster: Cluster, namespaces: list[str], hour: datetime) -> None:
    """One more deployment per namespace in ``namespaces``, one replica for ``hour`` each (for
    query counts)."""
    for n, namespace in enumerate(namespaces):
        workload = ServingWorkload.objects.create(
            cluster=cluster, namespace=namespace, kind="Deployment", name=f"extra-{n}"
        )
        _hour(
            workload, hour, replicas_seen=1, replica_hours=1.0, output_tokens_per_second=10.0
        ).save()

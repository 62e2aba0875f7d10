"""A small fleet with hand-computed ground truth, and signed-in clients of every kind.

Window: 2026-01-31T22:00Z .. 2026-02-01T02:00Z (4 hours, across a day and a month boundary).
Cluster "test", cohort "research":

- team alpha: ClusterQueue cq-alpha, LocalQueue alpha-ns/lq-a, workload alpha-ns/train-1, flavor
  h100 (GPU model H100). Every hour 4 GPUs allocated, nominal 6, lends 1. Telemetry on all 4 in
  the January hours (active 2.0, idle 1 GPU-hour) and on 2 in the February hours (active 1.0).
- team beta: cq-beta, beta-ns/lq-b, beta-ns/infer-1, flavor a100 (GPU model A100). Every hour 2
  GPUs, all with telemetry, active 1.5, nominal 1, borrows 1, pending 3.
- team gamma: cq-gamma, no usage (a zero row). cq-old was deleted before the window (no row).
- capacity: node-1 8 × h100, node-2 4 × a100.

Rate cards (USD): allocated h100 flavor 3.00, from 2026-02-01 4.00; A100 model 2.00; default
1.00; borrowing 5.00; lending credit 0.50.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from rest_framework.test import APIClient

from fleet.models import Cluster, Node
from ledger.choices import RateKind
from ledger.models import HourlyRollup, RateCard
from quotas.choices import ApiTokenScope
from quotas.models import (
    ApiToken,
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    TeamNamespace,
    Workload,
)
from tests.databases import kept_for_the_module

START = datetime(2026, 1, 31, 22, tzinfo=UTC)
END = datetime(2026, 2, 1, 2, tzinfo=UTC)
HOURS = [START + timedelta(hours=i) for i in range(4)]
PRICE_CHANGE = datetime(2026, 2, 1, tzinfo=UTC)
LONG_AGO = datetime(2025, 1, 1, tzinfo=UTC)


def alpha_hour(hour: datetime) -> dict[str, float]:
    january = hour < PRICE_CHANGE
    return {
        "allocated_gpu_hours": 4.0,
        "telemetry_gpu_hours": 4.0 if january else 2.0,
        "active_gpu_hours": 2.0 if january else 1.0,
        "idle_gpu_hours": 1.0 if january else 0.0,
    }


def beta_hour(hour: datetime) -> dict[str, float]:
    return {
        "allocated_gpu_hours": 2.0,
        "telemetry_gpu_hours": 2.0,
        "active_gpu_hours": 1.5,
        "idle_gpu_hours": 0.0,
    }


ALPHA_QUOTA = {"nominal_gpu_hours": 6.0, "lent_gpu_hours": 1.0}
BETA_QUOTA = {"nominal_gpu_hours": 1.0, "borrowed_gpu_hours": 1.0, "pending_gpu_hours": 3.0}


def add_rollup(cluster: Cluster, scope: str, key: str, hour: datetime, flavor: str, model: str,
               **figures: float) -> HourlyRollup:  # fmt: skip
    return HourlyRollup.objects.create(
        cluster=cluster,
        scope=scope,
        key=key,
        hour=hour,
        flavor=flavor,
        gpu_model=model,
        windows=60,
        **figures,
    )


def sum_figures(*parts: dict[str, float]) -> dict[str, float]:
    total: dict[str, float] = {}
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, 0.0) + value
    return total


def build_scenario() -> dict[str, Any]:
    """The fleet of the module docstring, written to the database."""
    cluster = Cluster.objects.create(name="test", display_name="Test")
    alpha = Team.objects.create(name="alpha")
    beta = Team.objects.create(name="beta")
    gamma = Team.objects.create(name="gamma")
    cohort = Cohort.objects.create(cluster=cluster, name="research")
    cq_alpha = ClusterQueue.objects.create(
        cluster=cluster, name="cq-alpha", cohort=cohort, cohort_name="research", team=alpha
    )
    cq_beta = ClusterQueue.objects.create(
        cluster=cluster, name="cq-beta", cohort=cohort, cohort_name="research", team=beta
    )
    ClusterQueue.objects.create(cluster=cluster, name="cq-gamma", team=gamma)
    ClusterQueue.objects.create(
        cluster=cluster, name="cq-old", team=gamma, deleted_at=START - timedelta(days=1)
    )
    lq_a = LocalQueue.objects.create(
        cluster=cluster,
        namespace="alpha-ns",
        name="lq-a",
        cluster_queue=cq_alpha,
        cluster_queue_name="cq-alpha",
    )
    LocalQueue.objects.create(
        cluster=cluster,
        namespace="beta-ns",
        name="lq-b",
        cluster_queue=cq_beta,
        cluster_queue_name="cq-beta",
    )
    TeamNamespace.objects.create(team=alpha, cluster=cluster, namespace="alpha-ns")
    train = Workload.objects.create(
        cluster=cluster,
        namespace="alpha-ns",
        name="train-1",
        queue_name="lq-a",
        local_queue=lq_a,
        cluster_queue=cq_alpha,
        labels={"app": "llm"},
        state="admitted",
    )
    infer = Workload.objects.create(
        cluster=cluster,
        namespace="beta-ns",
        name="infer-1",
        queue_name="lq-b",
        cluster_queue=cq_beta,
        state="admitted",
    )
    ResourceFlavor.objects.create(cluster=cluster, name="h100", gpu_model="H100")
    ResourceFlavor.objects.create(cluster=cluster, name="a100", gpu_model="A100")
    Node.objects.create(cluster=cluster, name="node-1", flavor="h100", gpu_capacity=8)
    Node.objects.create(cluster=cluster, name="node-2", flavor="a100", gpu_capacity=4)

    for hour in HOURS:
        _hour_rollups(cluster, hour, alpha, beta, cq_alpha, cq_beta, train, infer)
    # Outside the window: must never count.
    for hour in (START - timedelta(hours=1), END):
        add_rollup(cluster, "team", "alpha", hour, "h100", "H100", allocated_gpu_hours=100.0)
        add_rollup(
            cluster, "namespace", "alpha-ns", hour, "h100", "H100", allocated_gpu_hours=100.0
        )

    card = RateCard.objects.create
    card(kind=RateKind.ALLOCATED, flavor="h100", price_per_gpu_hour=Decimal("3.00"),
         effective_from=LONG_AGO)  # fmt: skip
    card(kind=RateKind.ALLOCATED, flavor="h100", price_per_gpu_hour=Decimal("4.00"),
         effective_from=PRICE_CHANGE)  # fmt: skip
    card(kind=RateKind.ALLOCATED, gpu_model="A100", price_per_gpu_hour=Decimal("2.00"),
         effective_from=LONG_AGO)  # fmt: skip
    card(kind=RateKind.ALLOCATED, price_per_gpu_hour=Decimal("1.00"), effective_from=LONG_AGO)
    card(kind=RateKind.BORROWING, price_per_gpu_hour=Decimal("5.00"), effective_from=LONG_AGO)
    card(kind=RateKind.LENDING, price_per_gpu_hour=Decimal("0.50"), effective_from=LONG_AGO)
    # Another currency is ignored.
    card(kind=RateKind.ALLOCATED, flavor="h100", price_per_gpu_hour=Decimal("99"),
         currency="EUR", effective_from=LONG_AGO)  # fmt: skip
    return {"cluster": cluster, "alpha": alpha, "beta": beta, "gamma": gamma}


def _hour_rollups(
    cluster: Cluster,
    hour: datetime,
    alpha: Team,
    beta: Team,
    cq_alpha: ClusterQueue,
    cq_beta: ClusterQueue,
    train: Workload,
    infer: Workload,
) -> None:
    a, b = alpha_hour(hour), beta_hour(hour)
    aq, bq = {**a, **ALPHA_QUOTA}, {**b, **BETA_QUOTA}
    # Queue-level scopes carry quota figures (fleet/rollup.py); the others only usage.
    HourlyRollup.objects.bulk_create(
        [
            HourlyRollup(
                cluster=cluster,
                scope=scope,
                key=key,
                hour=hour,
                flavor=flavor,
                gpu_model=model,
                windows=60,
                team=team,
                cluster_queue=queue,
                workload=workload,
                **figures,
            )  # fmt: skip
            for scope, key, flavor, model, team, queue, workload, figures in [
                ("team", "alpha", "h100", "H100", alpha, None, None, aq),
                ("team", "beta", "a100", "A100", beta, None, None, bq),
                ("cluster_queue", "cq-alpha", "h100", "H100", alpha, cq_alpha, None, aq),
                ("cluster_queue", "cq-beta", "a100", "A100", beta, cq_beta, None, bq),
                ("cohort", "research", "h100", "H100", None, None, None, aq),
                ("cohort", "research", "a100", "A100", None, None, None, bq),
                ("local_queue", "alpha-ns/lq-a", "h100", "H100", alpha, cq_alpha, None, a),
                ("local_queue", "beta-ns/lq-b", "a100", "A100", beta, cq_beta, None, b),
                ("namespace", "alpha-ns", "h100", "H100", None, None, None, a),
                ("namespace", "beta-ns", "a100", "A100", None, None, None, b),
                ("workload", "alpha-ns/train-1", "h100", "H100", alpha, cq_alpha, train, a),
                ("workload", "beta-ns/infer-1", "a100", "A100", beta, cq_beta, infer, b),
                (
                    "fleet",
                    "test",
                    "h100",
                    "H100",
                    None,
                    None,
                    None,
                    {**aq, "capacity_gpu_hours": 8.0},
                ),
                (
                    "fleet",
                    "test",
                    "a100",
                    "A100",
                    None,
                    None,
                    None,
                    {**bq, "capacity_gpu_hours": 4.0},
                ),
                (
                    "node",
                    "node-1",
                    "h100",
                    "H100",
                    None,
                    None,
                    None,
                    {**a, "capacity_gpu_hours": 8.0},
                ),
                (
                    "node",
                    "node-2",
                    "a100",
                    "A100",
                    None,
                    None,
                    None,
                    {**b, "capacity_gpu_hours": 4.0},
                ),
                (
                    "flavor",
                    "h100",
                    "h100",
                    "H100",
                    None,
                    None,
                    None,
                    {**aq, "capacity_gpu_hours": 8.0},
                ),
                (
                    "flavor",
                    "a100",
                    "a100",
                    "A100",
                    None,
                    None,
                    None,
                    {**bq, "capacity_gpu_hours": 4.0},
                ),
            ]
        ]
    )


@pytest.fixture(scope="module")
def shared_scenario(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """The scenario, built once for the tests of a module."""
    with kept_for_the_module(django_db_blocker):
        yield build_scenario()


@pytest.fixture
def scenario(shared_scenario: dict[str, Any], db: None) -> dict[str, Any]:
    """The scenario as built; each test's own changes are rolled back after it, and its objects
    are copies the test may change."""
    return copy.deepcopy(shared_scenario)


@pytest.fixture(autouse=True)
def _clear_throttle_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def staff(db):
    return User.objects.create_user("staff", password="x", is_staff=True)


@pytest.fixture
def finance_user(db):
    user = User.objects.create_user("fin", password="x")
    user.groups.add(Group.objects.get_or_create(name="finance")[0])
    return user


@pytest.fixture
def lead(scenario):
    user = User.objects.create_user("lead", password="x")
    scenario["alpha"].leads.add(user)
    return user


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def staff_client(staff):
    return client_for(staff)


@pytest.fixture
def lead_client(lead):
    return client_for(lead)


@pytest.fixture
def finance_token(finance_user):
    _token, key = ApiToken.issue(finance_user, "monthly export", ApiTokenScope.CHARGEBACK)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def staff_token_key(staff):
    """A full-scope API token of the staff user: the API's one kind of token."""
    _token, key = ApiToken.issue(staff, "tests", ApiTokenScope.FULL)
    return key

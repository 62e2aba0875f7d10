"""Serving deployments over a range: what each delivered per replica and per GPU, what it cost
per million output tokens, how saturated it ran, its knee and whether it is over-provisioned
(README "Serving: deployments", docs/architecture.md "Serving deployments").

The one read of ``ServingHour`` rows over a range for the Serving pages, the team page and the
capacity planner. Every figure is summed here from the hours, in Python (the knee and the share
of hours below it need each hour anyway); a figure no hour has is None ("no serving
telemetry"), never 0. A bounded number of queries whatever the number of deployments: the
workloads, their hours, their namespaces' DCGM rollups (through the read layer,
``HourlyRollup.objects``), the rate cards, and the namespaces' teams.

**Joining DCGM.** An hour's SM_ACTIVE is, first, that of the deployment's own pods' GPUs:
the active and telemetry GPU-hours the serving collector summed from the per-window usage rows
of its pods (``serving.dcgm``), so two deployments in one namespace each have their own. An
hour collected without such rows (older than the per-window retention when it was collected)
falls back to the DCGM rollups of its namespace (scope ``namespace``, one row per hour, flavor
and GPU model): the hour is *joined* when the namespace's allocated GPU-hours lie within
``JOIN_TOLERANCE`` of the deployment's own GPU-hours, i.e. the namespace held the deployment's
GPUs and nothing else that hour (a training job or a second deployment beside it leaves the
hour without SM_ACTIVE). SM_ACTIVE over the range is active ÷ telemetry GPU-hours over the
hours that have it (``core.ratios`` reading). The flavor and GPU model that price a deployment
are its namespace's over the range, each when there is one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from core.ranges import HourSpan
from ledger.chargeback.pricing import card_in_force, gpu_model_key, rate_cards
from ledger.chargeback.query import pairs_q
from ledger.choices import RateKind, RollupScope
from ledger.models import HourlyRollup, RateCard
from ledger.range_figures import Figures
from quotas.models import LocalQueue, Team, TeamNamespace
from serving.figures import below_knee_share, is_overprovisioned
from serving.knee import OUTPUT_TOKENS, Knee, knee
from serving.models import ServingHour, ServingWorkload

# A namespace hour joins a deployment's when its allocated GPU-hours are within 10 % of the
# deployment's: the serving scrape's coverage and the DCGM windows' differ by a few percent.
JOIN_TOLERANCE = 0.1
SECONDS_PER_HOUR = 3600
# GPUs per replica read as a whole number when within this of one (coverage rounding).
WHOLE_GPU_SLACK = 0.05
MILLION = 1_000_000

# The ServingHour columns a deployment's figures read, in this order.
HOUR_COLUMNS = (
    "workload_id",
    "hour",
    "replicas_seen",
    "replica_hours",
    "gpu_hours",
    "active_gpu_hours",
    "telemetry_gpu_hours",
    "requests_per_second",
    "prompt_tokens_per_second",
    "output_tokens_per_second",
    "mean_running",
    "mean_waiting",
    "kv_cache_mean",
    "kv_cache_max",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "itl_p50_seconds",
    "itl_p95_seconds",
    "e2e_p95_seconds",
)


@dataclass
class Hour:
    """One stored serving hour (``serving.knee.HourFigures``) with its joined SM_ACTIVE."""

    hour: datetime
    replicas_seen: int
    replica_hours: float
    gpu_hours: float | None
    requests_per_second: float | None
    prompt_tokens_per_second: float | None
    output_tokens_per_second: float | None
    mean_running: float | None
    mean_waiting: float | None
    kv_cache_mean: float | None
    kv_cache_max: float | None
    ttft_p50_seconds: float | None
    ttft_p95_seconds: float | None
    itl_p50_seconds: float | None
    itl_p95_seconds: float | None
    e2e_p95_seconds: float | None
    # The deployment's SM_ACTIVE that hour (its own pods' GPUs, else its namespace's when the
    # hour is joined: module docstring), else None, and the GPU-hours with telemetry it is over.
    sm_active: float | None = None
    sm_telemetry_gpu_hours: float = 0.0

    def per_replica(self, value: float | None) -> float | None:
        """``value`` (a deployment-wide rate or mean) per replica; None when unknown."""
        if value is None or self.replica_hours <= 0:
            return None
        return value / self.replica_hours


@dataclass(frozen=True)
class Deployment:
    """A serving deployment's figures over a range. None = no serving telemetry."""

    workload: ServingWorkload
    team: Team | None
    hours: list[Hour]
    mean_replicas: float | None
    mean_gpus: float | None
    output_tokens_per_second: float | None
    tokens_per_second_per_replica: float | None
    tokens_per_second_per_gpu: float | None
    requests_per_second: float | None
    flavor: str
    gpu_model: str
    cost: Decimal | None
    cost_per_million_tokens: Decimal | None
    currency: str
    sm_active: float | None
    sm_active_hours: int
    kv_cache_mean: float | None
    kv_cache_max: float | None
    mean_waiting: float | None
    running_per_replica: float | None
    knee: Knee | None
    knee_running_per_replica: float | None
    below_knee_share: float | None
    judged_hours: int
    overprovisioned: bool
    latest: Hour | None = field(default=None)

    @property
    def tokens_per_gpu_hour(self) -> float | None:
        per_gpu = self.tokens_per_second_per_gpu
        return None if per_gpu is None else per_gpu * SECONDS_PER_HOUR

    @property
    def path(self) -> str:
        """``namespace/name``, as the planner's ``workload`` field takes it."""
        return f"{self.workload.namespace}/{self.workload.name}"

    @property
    def full_path(self) -> str:
        """``cluster/namespace/kind/name``: names one deployment whatever else shares its name."""
        w = self.workload
        return f"{w.cluster.name}/{w.namespace}/{w.kind}/{w.name}"


def visible_workloads(allowed: set[int] | None) -> Q:
    """The serving workloads whose namespace belongs to a team in ``allowed`` (None = every
    one): a namespace is a team's by its ``TeamNamespace`` or a LocalQueue of the team's
    ClusterQueues there, as the chargeback reads namespaces (``visible_namespaces``)."""
    if allowed is None:
        return Q()
    return team_namespaces_q(allowed)


def team_namespaces_q(team_ids: Iterable[int]) -> Q:
    """``ServingWorkload`` rows in a namespace of one of ``team_ids``: a condition evaluated in
    the caller's query (no query of its own)."""
    ids = sorted(set(team_ids))
    same_namespace = {"cluster_id": OuterRef("cluster_id"), "namespace": OuterRef("namespace")}
    owned = TeamNamespace.objects.filter(team_id__in=ids, **same_namespace)
    queued = LocalQueue.objects.filter(cluster_queue__team_id__in=ids, **same_namespace)
    return Q(Exists(owned)) | Q(Exists(queued))


def namespace_teams(pairs: set[tuple[int, str]]) -> dict[tuple[int, str], Team]:
    """The team each (cluster, namespace) belongs to: its ``TeamNamespace``, else the team of
    the ClusterQueue its LocalQueues feed when that is one team (two queries)."""
    if not pairs:
        return {}
    clusters = {cluster for cluster, _ in pairs}
    namespaces = {namespace for _, namespace in pairs}
    found: dict[tuple[int, str], Team] = {}
    queued: dict[tuple[int, str], set[Team]] = defaultdict(set)
    for local in LocalQueue.objects.filter(
        cluster_id__in=clusters, namespace__in=namespaces, cluster_queue__team__isnull=False
    ).select_related("cluster_queue__team"):
        queued[(local.cluster_id, local.namespace)].add(local.cluster_queue.team)  # type: ignore[union-attr, arg-type]
    for key, teams in queued.items():
        if len(teams) == 1:
            found[key] = next(iter(teams))
    for owned in TeamNamespace.objects.filter(
        cluster_id__in=clusters, namespace__in=namespaces
    ).select_related("team"):
        found[(owned.cluster_id, owned.namespace)] = owned.team
    return {key: team for key, team in found.items() if key in pairs}


def deployments(
    span: HourSpan,
    workloads: Q | None = None,
    *,
    allowed: set[int] | None = None,
) -> list[Deployment]:
    """Every serving deployment with an hour in ``span`` among ``workloads`` (a Q on
    ``ServingWorkload``) that a user seeing ``allowed`` teams may see, with its figures; in
    cluster, namespace, kind, name order."""
    condition = visible_workloads(allowed) & (workloads or Q())
    rows = list(
        ServingHour.objects.filter(
            hour__gte=span.first,
            hour__lt=span.stop,
            workload__in=ServingWorkload.objects.filter(condition),
        )
        .order_by("workload_id", "hour")
        .values_list(*HOUR_COLUMNS)
    )
    by_workload: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        by_workload[row[0]].append(row)
    if not by_workload:
        return []
    found = list(ServingWorkload.objects.filter(pk__in=by_workload).select_related("cluster"))
    return _figures(found, by_workload, span)


def deployment(workload: ServingWorkload, span: HourSpan) -> Deployment:
    """One deployment's figures over ``span``; without an hour in it, every figure None."""
    rows = list(
        ServingHour.objects.filter(workload=workload, hour__gte=span.first, hour__lt=span.stop)
        .order_by("hour")
        .values_list(*HOUR_COLUMNS)
    )
    return _figures([workload], {workload.pk: rows}, span)[0]


def _figures(
    workloads: Sequence[ServingWorkload],
    rows: dict[int, list[tuple[Any, ...]]],
    span: HourSpan,
) -> list[Deployment]:
    pairs = {(w.cluster_id, w.namespace) for w in workloads}
    namespace_hours = _namespace_hours(pairs, span)
    teams = namespace_teams(pairs)
    currency = settings.GPULEDGER_CURRENCY
    cards = rate_cards(currency)
    result = []
    for workload in workloads:
        key = (workload.cluster_id, workload.namespace)
        dcgm = namespace_hours.get(key, {})
        hours = [_hour(row, dcgm.get(row[1])) for row in rows.get(workload.pk, [])]
        flavor, gpu_model = _one_flavor(dcgm)
        result.append(
            _deployment(workload, teams.get(key), hours, flavor, gpu_model, cards, currency)
        )
    return result


@dataclass
class _NamespaceHour:
    allocated: float = 0.0
    telemetry: float = 0.0
    active: float = 0.0
    flavors: set[tuple[str, str]] = field(default_factory=set)


def _namespace_hours(
    pairs: set[tuple[int, str]], span: HourSpan
) -> dict[tuple[int, str], dict[datetime, _NamespaceHour]]:
    """Per (cluster, namespace) and hour, its DCGM figures (one read-layer query)."""
    if not pairs:
        return {}
    summed: dict[Any, Figures] = (
        HourlyRollup.objects.for_scope(RollupScope.NAMESPACE)
        .covering(span)
        .filter(pairs_q(pairs))
        .figures(
            group_by=("cluster_id", "key", "hour", "flavor", "gpu_model"),
            names=("allocated_gpu_hours", "telemetry_gpu_hours", "active_gpu_hours"),
        )
    )
    found: dict[tuple[int, str], dict[datetime, _NamespaceHour]] = defaultdict(dict)
    for (cluster_id, key, hour, flavor, gpu_model), figures in summed.items():
        entry = found[(cluster_id, key)].setdefault(hour, _NamespaceHour())
        entry.allocated += figures.allocated_gpu_hours
        entry.telemetry += figures.telemetry_gpu_hours
        entry.active += figures.active_gpu_hours
        if figures.allocated_gpu_hours > 0:
            entry.flavors.add((flavor, gpu_model))
    return found


def joins(gpu_hours: float | None, dcgm: _NamespaceHour | None) -> bool:
    """Whether the namespace's DCGM hour is the deployment's GPUs (module docstring)."""
    if gpu_hours is None or gpu_hours <= 0 or dcgm is None or dcgm.telemetry <= 0:
        return False
    return abs(dcgm.allocated - gpu_hours) <= JOIN_TOLERANCE * gpu_hours


def _hour(row: tuple[Any, ...], dcgm: _NamespaceHour | None) -> Hour:
    values = dict(zip(HOUR_COLUMNS[1:], row[1:], strict=True))
    active, telemetry = values.pop("active_gpu_hours"), values.pop("telemetry_gpu_hours")
    if telemetry:
        # The deployment's own pods' GPUs (module docstring).
        return Hour(**values, sm_active=active / telemetry, sm_telemetry_gpu_hours=telemetry)
    if dcgm is None or not joins(values["gpu_hours"], dcgm):
        return Hour(**values)
    return Hour(
        **values,
        sm_active=dcgm.active / dcgm.telemetry,
        sm_telemetry_gpu_hours=dcgm.telemetry,
    )


def pricing_of(workload: ServingWorkload, span: HourSpan) -> tuple[str, str, Team | None]:
    """The (flavor, GPU model) that price ``workload``'s GPUs over ``span`` and its team, read as
    the Serving pages read them (module docstring): its namespace's one flavor and model, else
    ("", ""); the namespace's team, else None."""
    key = (workload.cluster_id, workload.namespace)
    flavor, gpu_model = _one_flavor(_namespace_hours({key}, span).get(key, {}))
    return flavor, gpu_model, namespace_teams({key}).get(key)


def _one_flavor(dcgm: dict[datetime, _NamespaceHour]) -> tuple[str, str]:
    """The namespace's flavor over the range when it held GPUs of one flavor, and its GPU model
    when of one model; "" for either that is not one. Each is judged apart: a flavor's rate card
    comes first in the precedence, so one flavor prices the deployment whatever its models. One
    model spelled two ways (the DCGM ``modelName`` and the node's ``nvidia.com/gpu.product``
    label) is one model (``gpu_model_key``); the first spelling seen (hour by hour, then
    alphabetically) names it."""
    flavors = {flavor for entry in dcgm.values() for flavor, _model in entry.flavors}
    models: dict[str, str] = {}
    for hour in sorted(dcgm):
        for _flavor, model in sorted(dcgm[hour].flavors):
            models.setdefault(gpu_model_key(model), model)
    return (
        next(iter(flavors)) if len(flavors) == 1 else "",
        next(iter(models.values())) if len(models) == 1 else "",
    )


def _ratio(numerator: float, denominator: float, seen: bool) -> float | None:
    return numerator / denominator if seen and denominator > 0 else None


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def _cost(
    hours: list[Hour], flavor: str, gpu_model: str, cards: list[RateCard]
) -> tuple[Decimal | None, float]:
    """(cost of the GPU-hours of the hours with output tokens, their output tokens), each hour
    at the allocated card in force then; None when no such hour has a card."""
    cost: Decimal | None = None
    tokens = 0.0
    for hour in hours:
        if hour.gpu_hours is None or hour.output_tokens_per_second is None:
            continue
        card = card_in_force(cards, RateKind.ALLOCATED, flavor, gpu_model, hour.hour)
        if card is None:
            continue
        cost = (cost or Decimal(0)) + card.price_per_gpu_hour * Decimal(repr(hour.gpu_hours))
        tokens += hour.output_tokens_per_second * SECONDS_PER_HOUR
    return cost, tokens


def _deployment(
    workload: ServingWorkload,
    team: Team | None,
    hours: list[Hour],
    flavor: str,
    gpu_model: str,
    cards: list[RateCard],
    currency: str,
) -> Deployment:
    with_tokens = [h for h in hours if h.output_tokens_per_second is not None]
    with_gpus = [h for h in hours if h.gpu_hours is not None]
    tokens_on_gpus = [h for h in with_tokens if h.gpu_hours is not None]
    running = [h for h in hours if h.mean_running is not None]
    kv = [h for h in hours if h.kv_cache_mean is not None]
    joined = [h for h in hours if h.sm_active is not None]
    cost, priced_tokens = _cost(hours, flavor, gpu_model, cards)
    found = knee(hours, workload.targets())
    share, judged = (None, 0) if found is None else below_knee_share(hours, found)
    knee_hour = next((h for h in hours if found is not None and h.hour == found.hour), None)
    return Deployment(
        workload=workload,
        team=team,
        hours=hours,
        mean_replicas=_ratio(sum(h.replica_hours for h in hours), len(hours), bool(hours)),
        mean_gpus=_ratio(
            sum(h.gpu_hours or 0.0 for h in with_gpus), len(with_gpus), bool(with_gpus)
        ),
        output_tokens_per_second=_mean(h.output_tokens_per_second for h in hours),
        tokens_per_second_per_replica=_ratio(
            sum(h.output_tokens_per_second or 0.0 for h in with_tokens),
            sum(h.replica_hours for h in with_tokens),
            bool(with_tokens),
        ),
        tokens_per_second_per_gpu=_ratio(
            sum(h.output_tokens_per_second or 0.0 for h in tokens_on_gpus),
            sum(h.gpu_hours or 0.0 for h in tokens_on_gpus),
            bool(tokens_on_gpus),
        ),
        requests_per_second=_mean(h.requests_per_second for h in hours),
        flavor=flavor,
        gpu_model=gpu_model,
        cost=cost,
        cost_per_million_tokens=None
        if cost is None or priced_tokens <= 0
        else cost * MILLION / Decimal(repr(priced_tokens)),
        currency=currency,
        sm_active=_weighted(joined),
        sm_active_hours=len(joined),
        kv_cache_mean=_ratio(
            sum((h.kv_cache_mean or 0.0) * h.replica_hours for h in kv),
            sum(h.replica_hours for h in kv),
            bool(kv),
        ),
        kv_cache_max=max(
            (h.kv_cache_max for h in hours if h.kv_cache_max is not None), default=None
        ),
        mean_waiting=_mean(h.mean_waiting for h in hours),
        running_per_replica=_ratio(
            sum(h.mean_running or 0.0 for h in running),
            sum(h.replica_hours for h in running),
            bool(running),
        ),
        knee=found,
        knee_running_per_replica=None
        if knee_hour is None
        else knee_hour.per_replica(knee_hour.mean_running),
        below_knee_share=share,
        judged_hours=judged,
        overprovisioned=is_overprovisioned(hours, found),
        latest=hours[-1] if hours else None,
    )


def _weighted(joined: list[Hour]) -> float | None:
    """SM_ACTIVE over the joined hours: Σ active ÷ Σ telemetry GPU-hours, as utilization is
    read everywhere (``core.ratios``)."""
    telemetry = sum(h.sm_telemetry_gpu_hours for h in joined)
    if telemetry <= 0:
        return None
    return sum((h.sm_active or 0.0) * h.sm_telemetry_gpu_hours for h in joined) / telemetry


# The capacity planner measures a deployment over its last 30 days (the picker's longest preset).
MEASURED_DAYS = 30


class UnknownWorkload(ValueError):
    """A planner ``workload`` that names no deployment the caller sees, or several."""


def find_workload(text: str, allowed: set[int] | None) -> ServingWorkload:
    """The deployment ``namespace/name`` or ``cluster/namespace/kind/name`` names among those
    a user seeing ``allowed`` teams sees; ``UnknownWorkload`` says why not."""
    parts = text.strip().split("/")
    if len(parts) == 2:
        condition = Q(namespace=parts[0], name=parts[1])
    elif len(parts) == 4:
        condition = Q(cluster__name=parts[0], namespace=parts[1], kind=parts[2], name=parts[3])
    else:
        raise UnknownWorkload("Give namespace/name, or cluster/namespace/kind/name.")
    found = list(
        ServingWorkload.objects.filter(visible_workloads(allowed), condition)
        .select_related("cluster")
        .order_by("cluster__name", "kind")[:10]
    )
    if not found:
        raise UnknownWorkload(f"No serving deployment {text.strip()!r}.")
    if len(found) > 1:
        names = ", ".join(f"{w.cluster.name}/{w.namespace}/{w.kind}/{w.name}" for w in found)
        raise UnknownWorkload(
            f"{text.strip()!r} names {len(found)} deployments ({names}): give "
            "cluster/namespace/kind/name."
        )
    return found[0]


@dataclass(frozen=True)
class Measurement:
    """What the planner takes from a deployment's last ``MEASURED_DAYS`` (None: not measured)."""

    deployment: Deployment
    request_rate: float | None
    input_tokens: float | None
    output_tokens: float | None
    replica_throughput_tokens_per_second: float | None
    replica_max_concurrency: int | None
    tensor_parallel: int | None
    deployed_replicas: int | None
    why_not: dict[str, str]


def measure(workload: ServingWorkload, span: HourSpan) -> Measurement:
    """The planner's inputs measured on the deployment over ``span``: the request rate of its
    busiest hour (a plan sized for the mean would queue every peak), its mean input and output
    tokens per request (weighted by requests, over the hours that count both); at its knee, its
    output tokens/s per replica and the knee hour's mean running requests per replica rounded to
    a whole number (at least 1); and its GPUs per replica when whole. The replicas it runs now
    are its newest hour's replica-hours, rounded. KV-cache size is not measured (only its use)."""
    d = deployment(workload, span)
    why: dict[str, str] = {}
    request_rate, input_tokens, output_tokens = _request_shape(d.hours, why)
    throughput = concurrency = tensor_parallel = None
    if d.knee is None:
        reason = "not measured: no hour of the deployment's last 30 days is within its targets"
        why["replica_throughput_tokens_per_second"] = reason
        why["replica_max_concurrency"] = reason
    elif d.knee.unit != OUTPUT_TOKENS:
        why["replica_throughput_tokens_per_second"] = (
            "not measured: the deployment's servers count no output tokens"
        )
    else:
        throughput = d.knee.per_replica
    if d.knee is not None:
        running = d.knee_running_per_replica
        if running is None:
            why["replica_max_concurrency"] = "not measured: no running requests at the knee"
        else:
            concurrency = max(1, round(running))
    newest = d.latest
    if newest is not None and newest.gpu_hours and newest.replica_hours > 0:
        per_replica = newest.gpu_hours / newest.replica_hours
        if abs(per_replica - round(per_replica)) < WHOLE_GPU_SLACK and round(per_replica) >= 1:
            tensor_parallel = round(per_replica)
    if tensor_parallel is None:
        why["tensor_parallel"] = "not measured: its GPUs per replica are not a whole number"
    why["kv_cache_tokens"] = "not measured: the servers report KV-cache use, not its size"
    return Measurement(
        deployment=d,
        request_rate=request_rate,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        replica_throughput_tokens_per_second=throughput,
        replica_max_concurrency=concurrency,
        tensor_parallel=tensor_parallel,
        deployed_replicas=None if newest is None else max(0, round(newest.replica_hours)),
        why_not=why,
    )


def _request_shape(
    hours: list[Hour], why: dict[str, str]
) -> tuple[float | None, float | None, float | None]:
    """(requests/s of the busiest hour, mean input tokens, mean output tokens per request) over
    ``hours``; each None with its reason in ``why`` when the servers do not count it."""
    with_requests = [h for h in hours if h.requests_per_second]
    if not with_requests:
        reason = "not measured: its servers counted no finished requests"
        why.update(request_rate=reason, input_tokens=reason, output_tokens=reason)
        return None, None, None
    rate = max(h.requests_per_second or 0.0 for h in with_requests)
    per_request: list[float | None] = []
    for name, counted in (
        ("input_tokens", "prompt_tokens_per_second"),
        ("output_tokens", "output_tokens_per_second"),
    ):
        both = [h for h in with_requests if getattr(h, counted) is not None]
        tokens = sum(getattr(h, counted) for h in both)
        requests = sum(h.requests_per_second or 0.0 for h in both)
        if not both or (name == "output_tokens" and tokens <= 0):
            why[name] = f"not measured: its servers count no {name.split('_')[0]} tokens"
            per_request.append(None)
        else:
            per_request.append(tokens / requests)
    return rate, per_request[0], per_request[1]

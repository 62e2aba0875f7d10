"""The ``serving_overprovisioned`` rule: episodes of an inference deployment that ran below half
its knee for most of the time (docs/architecture.md "Hoarding alerts", README "Serving: metrics").

The reading, chosen so that every figure can be traced back to stored hours:

- The rule is judged per complete UTC day from the deployment's ``ServingHour`` rows. A day is
  complete an hour after it ended once the serving collection of its last hour succeeded (or,
  if that never happens, once ``GPULEDGER_CATCHUP_HOURS`` have passed: the collector gave up on
  it).
- Each day's knee (``serving.knee``) is taken over the ``GPULEDGER_ALERT_SERVING_KNEE_DAYS`` of
  hours up to the day's end: what the deployment showed it can deliver per replica within its
  latency targets lately, the same whenever the day is judged again.
- The day *counts* when ``serving.figures.is_overprovisioned`` holds over its hours with that
  knee: below half the knee per replica in more than half of its judged hours. A day without a
  knee (no hour within the targets) or without a judged hour (no serving telemetry) is *not
  judged*: the reason is logged and kept in the episode's evidence, and the day does not count.
  Bad rows (a non-finite figure, no replica time) are skipped and logged.
- An episode starts at the first of ``GPULEDGER_ALERT_SERVING_DAYS`` counting days in a row and
  fires at the end of the last of them; it stays open while the days that follow count and
  resolves at the start of the first day that does not, whatever the reason: an over-provisioning
  claim (GPU-hours, cost) covers only unbroken runs of measured days.
- Its figures are the counted days': GPU-hours held (``ServingHour.gpu_hours``), wasted
  GPU-hours (per hour, the replicas beyond those its load needed at the knee's throughput, at
  least one, times the GPUs per replica) and their cost under the rate card of the flavor and
  GPU model of its namespace's GPUs, as the Serving pages price the deployment (the default card
  where the namespace held GPUs of several).

Each run re-reads the ``GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS`` complete days before now; a day
an episode of the deployment has seen (``evaluated_until``) is skipped, and the days in a row
before an episode opens are found again from the hours, so a re-run never writes twice. The
episodes are ordinary ``Episode`` rows (``serving_workload`` set): silences, exemptions (of the
deployment or its namespace), the pages, the API and the notification routes take them as any
other.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.choices import Rule, Severity
from alerts.daily import DAY, EVIDENCE_DAYS, save_day_episode
from alerts.exemptions import Subject
from alerts.models import Episode
from alerts.pricing import Prices
from core.deadlines import Deadline
from core.ranges import HourSpan
from core.timewindows import floor_time
from serving.choices import CollectionStatus
from serving.deployments import pricing_of
from serving.figures import KNEE_FRACTION, MOST_OF_THE_RANGE, below_knee_share, is_overprovisioned
from serving.knee import Knee, Targets, knee
from serving.models import ServingCollection, ServingHour, ServingWorkload

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
# A day is judged this long after it ended (its last hour collected a few minutes after it).
SETTLE = timedelta(hours=1)
COST_PLACES = Decimal("0.0001")  # Episode.cost's decimal places

# What a day is.
BELOW = "below_knee"  # counts
AT_KNEE = "at_knee"  # judged, not over-provisioned
NO_TELEMETRY = "no_telemetry"
NO_KNEE = "no_knee"
REASONS = {
    NO_TELEMETRY: "no serving telemetry in the day",
    NO_KNEE: "no knee: no hour within its latency targets",
}
VERDICTS = {
    BELOW: "below half the knee",
    AT_KNEE: "not below",
    NO_TELEMETRY: "no telemetry",
    NO_KNEE: "no knee",
}


@dataclass
class Hour:
    """The figures of one stored serving hour the rule reads (``serving.knee.HourFigures``)."""

    hour: datetime
    replica_hours: float
    output_tokens_per_second: float | None
    requests_per_second: float | None
    mean_waiting: float | None
    ttft_p95_seconds: float | None
    itl_p95_seconds: float | None
    gpu_hours: float | None


HOUR_FIELDS = tuple(f.name for f in fields(Hour))


@dataclass
class DayVerdict:
    """One complete day of one deployment."""

    day: datetime
    status: str
    knee: Knee | None = None
    share: float | None = None
    judged: int = 0
    gpu_hours: float = 0.0
    hours_with_gpus: int = 0
    wasted_gpu_hours: float = 0.0
    cost: Decimal = Decimal(0)

    @property
    def end(self) -> datetime:
        return self.day + DAY

    @property
    def counts(self) -> bool:
        return self.status == BELOW

    @property
    def gpus(self) -> float:
        """GPUs held on average over the day's hours with GPU requests."""
        return self.gpu_hours / self.hours_with_gpus if self.hours_with_gpus else 0.0


@dataclass
class ServingEvaluation:
    workloads: int = 0
    days: int = 0
    created: int = 0
    updated: int = 0
    skipped_rows: int = 0
    not_judged: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workloads": self.workloads,
            "days": self.days,
            "created": self.created,
            "updated": self.updated,
            "skipped_rows": self.skipped_rows,
            "not_judged": dict(self.not_judged),
        }


def subject_key(cluster: str, workload: ServingWorkload) -> str:
    return f"serving:{cluster}/{workload.namespace}/{workload.kind}/{workload.name}"


# --- pure: days from hours ---------------------------------------------------------------------


def _finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def usable(row: dict[str, Any]) -> tuple[Hour | None, str]:
    """The stored row as an ``Hour``, or (None, why) for a bad one."""
    replica_hours = row.get("replica_hours")
    if replica_hours is None or not math.isfinite(replica_hours) or replica_hours <= 0:
        return None, "no_replica_time"
    if not all(_finite(row.get(name)) for name in HOUR_FIELDS[1:]):
        return None, "nonfinite_figure"
    return Hour(**{name: row[name] for name in HOUR_FIELDS}), ""


def wasted_gpu_hours(hour: Hour, at_knee: Knee) -> float:
    """The hour's GPU-hours of the replicas beyond those its load needed at the knee's
    throughput per replica (at least one replica); 0 when a figure is unknown."""
    throughput = getattr(hour, at_knee.unit)
    if throughput is None or hour.gpu_hours is None or at_knee.per_replica <= 0:
        return 0.0
    needed = max(1.0, float(math.ceil(throughput / at_knee.per_replica - 1e-9)))
    excess = max(0.0, hour.replica_hours - needed)
    return excess * hour.gpu_hours / hour.replica_hours


def judge_days(
    hours: Sequence[Hour],
    targets: Targets,
    days: Sequence[datetime],
    knee_days: int,
    price: Callable[[datetime], Decimal],
) -> list[DayVerdict]:
    """Each day's verdict (``hours`` oldest first; see the module docstring)."""
    starts = [hour.hour for hour in hours]
    verdicts = []
    for day in days:
        end = day + DAY
        own = hours[bisect.bisect_left(starts, day) : bisect.bisect_left(starts, end)]
        lookback = hours[
            bisect.bisect_left(starts, end - knee_days * DAY) : bisect.bisect_left(starts, end)
        ]
        verdict = DayVerdict(day=day, status=NO_TELEMETRY)
        verdicts.append(verdict)
        for hour in own:
            if hour.gpu_hours is not None:
                verdict.gpu_hours += hour.gpu_hours
                verdict.hours_with_gpus += 1
        if not own:
            continue
        verdict.knee = knee(lookback, targets)
        if verdict.knee is None or verdict.knee.per_replica <= 0:
            verdict.status = NO_KNEE
            continue
        verdict.share, verdict.judged = below_knee_share(own, verdict.knee)
        if not verdict.judged:
            continue
        verdict.status = BELOW if is_overprovisioned(own, verdict.knee) else AT_KNEE
        for hour in own:
            wasted = wasted_gpu_hours(hour, verdict.knee)
            verdict.wasted_gpu_hours += wasted
            verdict.cost += Decimal(str(wasted)) * price(hour.hour)
    return verdicts


# --- reading and writing -----------------------------------------------------------------------


def judged_until(cluster_id: int, now: datetime) -> datetime:
    """The end of the newest complete day (see the module docstring)."""
    until = floor_time(now - SETTLE, int(DAY.total_seconds()))
    last_hour = until - HOUR
    collected = ServingCollection.objects.filter(
        cluster_id=cluster_id, hour=last_hour, status=CollectionStatus.SUCCESS
    ).exists()
    if not collected and now < until + timedelta(hours=settings.GPULEDGER_CATCHUP_HOURS):
        return until - DAY
    return until


def read_hours(
    workload: ServingWorkload, start: datetime, end: datetime, result: ServingEvaluation
) -> list[Hour]:
    """The deployment's stored hours in ``[start, end)``, oldest first; bad rows are skipped and
    logged."""
    hours, skipped = [], Counter[str]()
    rows = ServingHour.objects.filter(workload=workload, hour__gte=start, hour__lt=end)
    for row in rows.order_by("hour").values(*HOUR_FIELDS):
        hour, why = usable(row)
        if hour is None:
            skipped[why] += 1
        else:
            hours.append(hour)
    if skipped:
        result.skipped_rows += sum(skipped.values())
        logger.warning("serving %s: skipped bad hours %s", workload, dict(skipped))
    return hours


@dataclass(frozen=True)
class Pricing:
    """Where the deployment's GPUs are priced, and whose they are."""

    flavor: str
    gpu_model: str
    team_id: int | None


def _pricing(workload: ServingWorkload, start: datetime, end: datetime) -> Pricing:
    """Its flavor, GPU model and team over ``[start, end)`` as the Serving pages read them
    (``serving.deployments.pricing_of``)."""
    flavor, gpu_model, team = pricing_of(workload, HourSpan(start, end))
    return Pricing(flavor, gpu_model, None if team is None else team.pk)


def evaluate_serving(
    now: datetime | None = None, deadline: Deadline | None = None
) -> ServingEvaluation:
    """Judge every serving deployment's complete days of the lookback and move its episodes on."""
    now = now or timezone.now()
    result = ServingEvaluation()
    prices = Prices()
    until_by_cluster: dict[int, datetime] = {}
    workloads = ServingWorkload.objects.select_related("cluster").order_by("pk")
    for workload in workloads:
        if deadline is not None and deadline.expired():
            logger.warning("serving over-provisioning: %s passed; the rest waits", deadline)
            break
        until = until_by_cluster.get(workload.cluster_id)
        if until is None:
            until = until_by_cluster[workload.cluster_id] = judged_until(workload.cluster_id, now)
        result.workloads += 1
        with transaction.atomic():
            _evaluate_workload(workload, until, now, prices, result)
    if result.created or result.updated:
        logger.info(
            "serving over-provisioning: %d deployments, %d days judged: %d episodes created, "
            "%d updated",
            result.workloads,
            result.days,
            result.created,
            result.updated,
        )
    return result


def _evaluate_workload(
    workload: ServingWorkload,
    until: datetime,
    now: datetime,
    prices: Prices,
    result: ServingEvaluation,
) -> None:
    key = subject_key(workload.cluster.name, workload)
    lookback = settings.GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS
    knee_days = settings.GPULEDGER_ALERT_SERVING_KNEE_DAYS
    first = until - lookback * DAY
    episodes = Episode.objects.select_for_update().filter(
        rule=Rule.SERVING_OVERPROVISIONED, subject_key=key
    )
    newest = episodes.order_by("-evaluated_until").first()
    seen_until = newest.evaluated_until if newest is not None else None
    if seen_until is not None and seen_until >= until:
        return
    hours = read_hours(workload, first - knee_days * DAY, until, result)
    pricing = _pricing(workload, first, until)

    def price(at: datetime) -> Decimal:
        return prices.price(pricing.flavor, pricing.gpu_model, at)

    days = [first + n * DAY for n in range(lookback)]
    verdicts = judge_days(hours, workload.targets(), days, knee_days, price)
    _log_not_judged(workload, [v for v in verdicts if not seen_until or v.end > seen_until])
    active = episodes.filter(resolved_at__isnull=True).first()
    streak: list[DayVerdict] = []
    fire_after = settings.GPULEDGER_ALERT_SERVING_DAYS
    for verdict in verdicts:
        if seen_until is not None and verdict.end <= seen_until:
            streak = []  # an episode has seen the day: its own, or the one that ended it
            continue
        result.days += 1
        if verdict.status in REASONS:
            result.not_judged[verdict.status] += 1
        if active is not None:
            _note(active, verdict)
            if verdict.counts:
                _extend(active, verdict)
            else:
                active.resolved_at = verdict.day
                _save(active, workload, now, result)
                active = None
            continue
        streak = [*streak, verdict] if verdict.counts else []
        if len(streak) >= fire_after:
            active = _open(workload, key, pricing, streak)
    if active is not None:
        _save(active, workload, now, result)


def _log_not_judged(workload: ServingWorkload, verdicts: list[DayVerdict]) -> None:
    reasons = Counter(v.status for v in verdicts if v.status in REASONS)
    for status, days in sorted(reasons.items()):
        logger.info(
            "serving %s: %d day%s not judged (%s)",
            workload,
            days,
            "" if days == 1 else "s",
            REASONS[status],
        )


def _open(
    workload: ServingWorkload, key: str, pricing: Pricing, streak: list[DayVerdict]
) -> Episode:
    """The episode of ``streak`` (the counting days in a row that open it): it started with the
    first and fired at the end of the last."""
    episode = Episode(
        rule=Rule.SERVING_OVERPROVISIONED,
        severity=Severity.WARNING,
        cluster=workload.cluster,
        team_id=pricing.team_id,
        namespace=workload.namespace,
        serving_workload=workload,
        subject_key=key,
        started_at=streak[0].day,
        evaluated_until=streak[0].day,
        detected_live=True,
        evidence={
            "deployment": str(workload),
            "knee_days": settings.GPULEDGER_ALERT_SERVING_KNEE_DAYS,
            "fraction": KNEE_FRACTION,
            "most": MOST_OF_THE_RANGE,
            "fire_after_days": settings.GPULEDGER_ALERT_SERVING_DAYS,
            "flavor": pricing.flavor,
            "gpu_model": pricing.gpu_model,
            "counted_days": 0,
            "judged_hours": 0,
            "below_hours": 0,
            "days": [],
        },
    )
    for verdict in streak:
        _note(episode, verdict)
        _extend(episode, verdict)
    episode.fired_at = streak[-1].end
    return episode


def _extend(episode: Episode, verdict: DayVerdict) -> None:
    """A counting day: its hours and figures join the episode's; its knee is the newest."""
    episode.held_seconds += int(DAY.total_seconds())
    episode.last_held_at = verdict.end
    episode.gpus = round(verdict.gpus, 4)
    episode.held_gpu_hours += verdict.gpu_hours
    episode.idle_gpu_hours += verdict.wasted_gpu_hours
    episode.cost = (Decimal(episode.cost) + verdict.cost).quantize(COST_PLACES)
    evidence = episode.evidence
    evidence["counted_days"] = int(evidence.get("counted_days", 0)) + 1
    evidence["judged_hours"] = int(evidence.get("judged_hours", 0)) + verdict.judged
    below = round((verdict.share or 0.0) * verdict.judged)
    evidence["below_hours"] = int(evidence.get("below_hours", 0)) + below
    evidence["share_below"] = evidence["below_hours"] / max(1, evidence["judged_hours"])
    if verdict.knee is not None:
        evidence["knee_per_replica"] = verdict.knee.per_replica
        evidence["knee_unit"] = verdict.knee.unit
        evidence["knee_hour"] = verdict.knee.hour.isoformat() if verdict.knee.hour else None
        evidence["knee_replicas"] = verdict.knee.replicas
    evidence["gpus_held"] = episode.gpus


def _note(episode: Episode, verdict: DayVerdict) -> None:
    """The day is the episode's newest seen, and listed in its evidence."""
    episode.evaluated_until = verdict.end
    entry: dict[str, Any] = {
        "day": verdict.day.date().isoformat(),
        "status": verdict.status,
        "share_below": verdict.share,
        "judged_hours": verdict.judged,
        "knee_per_replica": verdict.knee.per_replica if verdict.knee else None,
        "gpu_hours": round(verdict.gpu_hours, 4),
        "wasted_gpu_hours": round(verdict.wasted_gpu_hours, 4),
    }
    days = [item for item in episode.evidence.get("days", []) if item.get("day") != entry["day"]]
    episode.evidence["days"] = [*days, entry][-EVIDENCE_DAYS:]


def evidence_days(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """The days an episode's evidence lists, newest first, with their verdict in words."""
    days = [
        {**entry, "verdict": VERDICTS.get(str(entry.get("status")), str(entry.get("status")))}
        for entry in evidence.get("days", [])
        if isinstance(entry, dict)
    ]
    return days[::-1]


def _save(
    episode: Episode, workload: ServingWorkload, now: datetime, result: ServingEvaluation
) -> None:
    subject = Subject(namespace=workload.namespace, serving_workload_id=workload.pk)
    if save_day_episode(episode, subject, now):
        result.created += 1
    else:
        result.updated += 1

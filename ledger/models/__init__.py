"""The join: per-window GPU usage per allocation, hourly rollups of every figure, rate cards.
The read layer over the rollups, ``HourlyRollup.objects``, is ``ledger.read``; the per-window
usage tables are in ``ledger.models.usage``.

The tables keep the names they had before this app existed (``db_table``), so the move from
``fleet`` and ``quotas`` changed no data (migrations ``ledger.0001``, ``fleet.0004``,
``quotas.0002``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from fleet.models import Cluster
from ledger.choices import RateKind, RollupScope
from ledger.models.usage import GpuUsage, GpuUsageQuerySet, UsageFact, UsageHolding, UsageWindow
from ledger.range_figures import FIGURES, Figures
from ledger.read import HourlyRollupQuerySet
from quotas.models import ClusterQueue, Team, Workload, default_currency

__all__ = [
    "GpuUsage",
    "GpuUsageQuerySet",
    "HourlyRollup",
    "PruneRun",
    "RateCard",
    "RollupHour",
    "UsageFact",
    "UsageHolding",
    "UsageWindow",
]


class HourlyRollup(models.Model):
    """Every figure of docs/architecture.md "Figures" for one group, one hour, one flavor / GPU
    model.

    ``key`` is the group's natural name (team name, ``namespace/name`` for namespaced objects,
    node name, cluster name for the fleet); the optional foreign keys let pages join cheaply.
    """

    cluster = models.ForeignKey(Cluster, related_name="rollups", on_delete=models.CASCADE)
    scope = models.CharField(max_length=20, choices=RollupScope.choices)
    key = models.CharField(max_length=520)
    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    team = models.ForeignKey(
        Team,
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    workload = models.ForeignKey(
        Workload,
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    capacity_gpu_hours = models.FloatField(default=0.0)
    allocated_gpu_hours = models.FloatField(default=0.0)
    telemetry_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Allocated GPU-hours that have telemetry.",
    )
    active_gpu_hours = models.FloatField(default=0.0, help_text="Σ activity × GPU-hours.")
    idle_gpu_hours = models.FloatField(default=0.0)
    shared_gpu_hours = models.FloatField(default=0.0)
    fallback_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Telemetry GPU-hours whose activity came from GR_ENGINE_ACTIVE.",
    )
    tensor_active_gpu_hours = models.FloatField(default=0.0)
    tensor_covered_gpu_hours = models.FloatField(default=0.0)
    gpu_util_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Σ GPU_UTIL/100 × GPU-hours, for 'busy but not working'.",
    )
    gpu_util_covered_gpu_hours = models.FloatField(default=0.0)
    busy_not_working_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Allocated GPU-hours with GPU_UTIL high while SM_ACTIVE is low.",
    )
    nominal_gpu_hours = models.FloatField(default=0.0)
    borrowed_gpu_hours = models.FloatField(default=0.0)
    lent_gpu_hours = models.FloatField(default=0.0)
    pending_gpu_hours = models.FloatField(default=0.0)
    peak_allocated_gpus = models.FloatField(default=0.0)
    windows = models.PositiveIntegerField(default=0, help_text="Collection windows rolled in.")
    updated_at = models.DateTimeField(auto_now=True)

    objects = HourlyRollupQuerySet.as_manager()

    # The figure columns, summed by the read layer (ledger.range_figures.Figures: one field each).
    FIGURES = FIGURES

    class Meta:
        db_table = "fleet_hourlyrollup"
        ordering = ["-hour", "scope", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "scope", "key", "hour", "flavor", "gpu_model"],
                name="fleet_rollup_identity",
            ),
        ]
        indexes = [
            # Chargeback and pages: one scope over a time range, grouped by key.
            models.Index(fields=["scope", "hour", "key"], name="fleet_rollup_scope_hour"),
            # Team page: one team's hours.
            models.Index(fields=["team", "scope", "hour"], name="fleet_rollup_team_hour"),
            # ClusterQueue page: one queue's hours.
            models.Index(
                fields=["cluster_queue", "scope", "hour"],
                name="fleet_rollup_cq_hour",
            ),
            # Workload page and workload chargeback.
            models.Index(fields=["workload", "hour"], name="fleet_rollup_workload_hour"),
            # Busy-but-not-working page, per workload over a range (busy_by_workload):
            # partial (only group-hours that had any) and carrying every summed column, so
            # PostgreSQL answers 30 days of 50,000 workloads with an index-only scan. Plain key
            # columns rather than INCLUDE, which SQLite does not support.
            models.Index(
                fields=[
                    "scope",
                    "hour",
                    "workload",
                    "team",
                    "busy_not_working_gpu_hours",
                    "allocated_gpu_hours",
                    "gpu_util_gpu_hours",
                    "gpu_util_covered_gpu_hours",
                    "active_gpu_hours",
                    "telemetry_gpu_hours",
                    "peak_allocated_gpus",
                ],
                condition=Q(busy_not_working_gpu_hours__gt=0),
                name="fleet_rollup_busy_hour",
            ),
            # Chargeback (ledger.chargeback.aggregate_pieces): one scope over a range, summed
            # per (cluster, key, flavor, GPU model) as an index-only scan, so a year by team
            # reads ~200 MB of index instead of the whole table (bench/RESULTS.md).
            models.Index(
                fields=["scope", "hour"],
                include=[
                    "cluster",
                    "key",
                    "flavor",
                    "gpu_model",
                    "capacity_gpu_hours",
                    "allocated_gpu_hours",
                    "telemetry_gpu_hours",
                    "active_gpu_hours",
                    "idle_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                    "pending_gpu_hours",
                ],
                name="fleet_rollup_chargeback",
            ),
            # Cohort and team charts and the cohort's borrowing flows: a month of every member
            # ClusterQueue's hours (20 queues: 14,400 rows, each on its own table page) as an
            # index-only scan of what those charts plot (bench/RESULTS.md, 2026-12-01).
            models.Index(
                fields=["cluster_queue", "hour"],
                include=[
                    "flavor",
                    "allocated_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                ],
                condition=Q(scope=RollupScope.CLUSTER_QUEUE),
                name="fleet_rollup_cq_series",
            ),
            # The busy-but-not-working page's team table and chart (dashboard.queries.busy
            # busy_by_team): a month of every team's hours (72,000 rows on bench/pages.py's
            # data, each on its own table page: a bitmap heap scan of 70 ms) as an index-only
            # scan of the figures that table shows.
            models.Index(
                fields=["hour"],
                include=[
                    "team",
                    "busy_not_working_gpu_hours",
                    "allocated_gpu_hours",
                    "gpu_util_gpu_hours",
                    "gpu_util_covered_gpu_hours",
                    "active_gpu_hours",
                    "telemetry_gpu_hours",
                ],
                condition=Q(scope=RollupScope.TEAM),
                name="fleet_rollup_team_busy",
            ),
            # The workload list sorted by a figure (HourlyRollupQuerySet.ranking): every
            # workload's rows of the range, with what its GPU-hours, idle share and cost sum.
            models.Index(
                fields=["hour"],
                include=[
                    "workload",
                    "flavor",
                    "gpu_model",
                    "allocated_gpu_hours",
                    "idle_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                ],
                condition=Q(scope=RollupScope.WORKLOAD),
                name="fleet_rollup_workload_rank",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key} {self.hour:%Y-%m-%d %H:00}"

    @classmethod
    def figures_in_index(cls, index_name: str) -> tuple[str, ...]:
        """The figures an index of this table carries: a sum of only those (and of grouping
        columns it carries) can be answered by an index-only scan."""
        index = next(index for index in cls._meta.indexes if index.name == index_name)
        carried = {*index.fields, *index.include}
        return tuple(name for name in FIGURES if name in carried)

    @property
    def figures(self) -> Figures:
        """This row's figures, with the ratios."""
        return Figures.of(self)

    @property
    def utilization(self) -> float | None:
        return self.figures.utilization

    @property
    def telemetry_coverage(self) -> float | None:
        return self.figures.telemetry_coverage


class RateCardQuerySet(models.QuerySet["RateCard"]):
    def in_currency(self, currency: str) -> RateCardQuerySet:
        return self.filter(currency=currency)


class RateCard(models.Model):
    """A price per GPU-hour for one flavor, one GPU model, or everything else, from a date on.

    A new price is a new card with a later ``effective_from``; each hour is priced with the card
    in force when it starts, so past periods keep their price. A flavor card beats a GPU-model
    card, which beats a default card (both empty).
    """

    kind = models.CharField(
        max_length=16,
        choices=RateKind.choices,
        default=RateKind.ALLOCATED,
    )
    flavor = models.CharField(
        max_length=253,
        blank=True,
        help_text="ResourceFlavor name this price is for; empty = not flavor-specific.",
    )
    gpu_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="GPU model (DCGM modelName), used when no flavor card matches.",
    )
    price_per_gpu_hour = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        help_text="Price of one GPU-hour (credit per lent GPU-hour for lending cards).",
    )
    currency = models.CharField(
        max_length=3,
        default=default_currency,
        help_text="ISO 4217; only cards in GPULEDGER_CURRENCY are used.",
    )
    effective_from = models.DateTimeField(
        help_text="Hours starting at or after this instant use this price.",
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RateCardQuerySet.as_manager()

    class Meta:
        db_table = "quotas_ratecard"
        ordering = ["kind", "flavor", "gpu_model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "flavor", "gpu_model", "currency", "effective_from"],
                name="quotas_ratecard_effective",
            ),
            models.CheckConstraint(
                condition=models.Q(flavor="") | models.Q(gpu_model=""),
                name="quotas_ratecard_one_target",
            ),
            models.CheckConstraint(
                condition=models.Q(price_per_gpu_hour__gte=0),
                name="quotas_ratecard_price_not_negative",
            ),
        ]

    def __str__(self) -> str:
        target = self.flavor or self.gpu_model or "default"
        return f"{self.kind} {target} {self.price_per_gpu_hour} {self.currency}"


def _dirty() -> Q:
    return Q(changes__gt=models.F("rolled_changes"))


def _unsettled(now: datetime) -> Q:
    wait = RollupHour.settle_delay()
    settled_at = models.ExpressionWrapper(
        models.F("hour") + wait, output_field=models.DateTimeField()
    )
    return Q(hour__lte=now - wait) & (Q(rolled_up_at__isnull=True) | Q(rolled_up_at__lt=settled_at))


class RollupHourQuerySet(models.QuerySet["RollupHour"]):
    def kept(self) -> RollupHourQuerySet:
        """Hours whose usage rows are all still there (none pruned), so they can be re-rolled."""
        return self.filter(usage_pruned=False)

    def dirty(self) -> RollupHourQuerySet:
        """Hours with a window written since (or while) their last successful rollup read them."""
        return self.filter(_dirty())

    def due(self, now: datetime) -> RollupHourQuerySet:
        """Hours to roll up now: kept, and dirty, or past their settle time with no rollup since."""
        return self.kept().filter(_dirty() | _unsettled(now))


class RollupHour(models.Model):
    """Whether one cluster-hour's rollup includes every window written to it (ledger.rollup).

    The collector bumps ``changes`` in the transaction that writes a window of the hour;
    ``roll_up_hour`` reads ``changes`` before it computes and stores what it read in
    ``rolled_changes`` in the transaction that replaces the rollup rows. So a rollup that failed,
    was killed, or raced a later window leaves ``changes > rolled_changes``: the hour is dirty
    until a rollup that saw every window commits. Queue samples are written by the Kueue sync,
    which cannot bump the counter: an hour last rolled up before ``GPULEDGER_ROLLUP_SETTLE_SECONDS``
    after its end is rolled up once more after that.
    """

    cluster = models.ForeignKey(
        Cluster,
        related_name="rollup_hours",
        on_delete=models.CASCADE,
    )
    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    changes = models.PositiveBigIntegerField(
        default=0,
        help_text="Bumped with every window written to this hour.",
    )
    rolled_changes = models.PositiveBigIntegerField(
        default=0,
        help_text="The change count the last successful rollup read before computing.",
    )
    rolled_up_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the last successful rollup started reading the hour.",
    )
    usage_pruned = models.BooleanField(
        default=False,
        help_text="Retention deleted usage rows of this hour: its rollup is kept, never rebuilt.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RollupHourQuerySet.as_manager()

    class Meta:
        ordering = ["-hour", "cluster_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "hour"],
                name="ledger_rolluphour_cluster_hour",
            ),
        ]
        indexes = [
            # The sweep (ledger.rollup.completeness.due_hours): only hours whose usage is kept,
            # a couple of weeks per cluster out of the 400 days of rollups.
            models.Index(
                fields=["cluster", "hour"],
                condition=Q(usage_pruned=False),
                name="ledger_rolluphour_kept",
            ),
        ]

    def __str__(self) -> str:
        done = f"{self.rolled_changes}/{self.changes} changes rolled up"
        return f"cluster {self.cluster_id} {self.hour:%Y-%m-%d %H:00} ({done})"

    @staticmethod
    def settle_delay() -> timedelta:
        """From an hour's start until its late queue samples are in: the hour, then the settle."""
        return timedelta(hours=1, seconds=settings.GPULEDGER_ROLLUP_SETTLE_SECONDS)

    @property
    def is_dirty(self) -> bool:
        return self.changes > self.rolled_changes


class PruneRun(models.Model):
    """One retention run (``ledger.tasks.prune_usage``): how long it took, what it deleted, and
    why it failed. The product's own ``/metrics`` reports the newest one (README "Metrics")."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    succeeded = models.BooleanField(default=False, help_text="False while running or failed.")
    rows_deleted = models.JSONField(
        default=dict,
        blank=True,
        help_text="Rows deleted per kind (usage, rollups, ingest_runs).",
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        state = "succeeded" if self.succeeded else "failed or running"
        return f"prune {self.started_at:%Y-%m-%d %H:%M:%S} {state}"

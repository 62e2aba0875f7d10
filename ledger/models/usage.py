"""Per-window GPU usage, stored compactly: what repeats every window is written once.

* ``UsageHolding``: one GPU (or one pod's share of it) as held by one pod, with everything that
  stays the same from window to window: GPU, pod, node, flavor, model, owners, GPUs carried.
  Written once, then only its first and last window seen move.
* ``UsageFact``: one holding in one window: the window end and the DCGM figures, nothing else
  (about 120 bytes with its index on PostgreSQL, bench/storage.py). On PostgreSQL the table is
  range-partitioned by day on ``window_end`` and retention drops whole days
  (``ledger.store.partitions``); elsewhere it is one plain table.
* ``UsageWindow``: one row per stored (cluster, window), so "which windows are there" never
  reads the facts.
* ``GpuUsage``: the read model, a database view joining facts and holdings into the wide row
  every reader knows (``fleet_gpuusage``, the table's old name). Writes go through
  ``ledger.store.write_window``; ``bulk_create`` and ``delete`` on ``GpuUsage.objects`` split or
  find the rows in the tables underneath, for the simulator and for tests.

Types: what the rollups sum or compare with a threshold stays double precision, so every
figure is the one the wide table gave: ``activity`` (idle is ``activity < 0.01``, and 0.01 in
single precision is below 0.01; its sums are the chargeback's active hours),
``pipe_tensor_active`` and ``gpu_util`` (summed into the tensor and GPU_UTIL hours).
``sm_active`` and ``gr_engine_active`` are not stored when they are the activity's source (the
view reads ``activity`` back), so the busy-but-not-working test on ``sm_active`` is exact too.
What is only shown is single precision: DRAM activity, framebuffer MiB, and the fallback
metric when the other one is the source (7 significant digits, a relative error below 6e-8).

The foreign keys have no database constraint (``db_constraint=False``), as the wide table had:
integrity is kept by the only writer, which takes every id from the database in the same
transaction; Django still applies ``on_delete`` when referenced rows are deleted through the ORM.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction

from core import bulk
from core.timewindows import hour_floor
from fleet import constants as fleet_constants
from fleet.choices import ActivitySource
from fleet.models import Cluster, Gpu
from ledger import partitions
from quotas.models import ClusterQueue, LocalQueue, Team, Workload

# What a holding is: every column that stays the same while a pod holds a GPU.
HOLDING_COLUMNS = (
    "gpu_id",
    "gpu_key",
    "namespace",
    "pod",
    "container",
    "node_name",
    "flavor",
    "gpu_model",
    "workload_id",
    "local_queue_id",
    "cluster_queue_id",
    "team_id",
    "allocated",
    "gpus",
    "capacity_gpus",
    "shared",
    "window_seconds",
)
# A fact's figures, in GpuUsage's names (``source`` is ``activity_source`` as a small number).
FACT_FIGURES = (
    "activity",
    "sm_active",
    "pipe_tensor_active",
    "dram_active",
    "gr_engine_active",
    "gpu_util",
    "fb_used_mib",
)
# What a wide row says besides its figures, turned into a fact's ``source`` and counts.
FACT_COUNTS = ("activity_source", "samples", "expected_samples")
FACT_COLUMNS = ("holding_id", "window_end", *FACT_FIGURES, "source", "samples", "expected_samples")
# ``source``: where the activity came from; 3 and 4 say that the source's own column is not
# stored because it equals the activity (the view reads the activity back).
SOURCE_CODES = {
    ActivitySource.NONE: 0,
    ActivitySource.SM_ACTIVE: 1,
    ActivitySource.GR_ENGINE_ACTIVE: 2,
}
SM_FOLDED, GR_FOLDED = 3, 4
# The largest count a smallint holds; more samples than this in one window are counted as this.
MAX_SAMPLES = 32767


class Float4Field(models.FloatField):
    """A single-precision float (``real``): 4 bytes a value instead of 8."""

    def db_type(self, connection: Any) -> str:
        return "real"


def holding_digest(values: Sequence[Any]) -> str:
    """The identity of a holding's ``HOLDING_COLUMNS`` values, as 32 hex digits.

    One short unique key instead of a unique index over 17 columns, several of them nullable
    (NULLs are distinct in a unique index, so such an index would not keep holdings unique)."""
    return hashlib.blake2b(repr(tuple(values)).encode(), digest_size=16).hexdigest()


class UsageHoldingQuerySet(models.QuerySet["UsageHolding"]):
    def ids_for(
        self, cluster_id: int, identities: Sequence[Sequence[Any]], window_end: datetime
    ) -> list[int]:
        """The ids of the holdings with these ``HOLDING_COLUMNS`` values, in the order given:
        created where new, their seen-from / seen-until hours widened to ``window_end``'s.

        The bounds move at most once an hour per holding, not every window: a row version per
        holding and window would bloat the table and cost an UPDATE of every GPU a window."""
        digests = [holding_digest(values) for values in identities]
        wanted = dict(zip(digests, identities, strict=True))
        stored = self._read(cluster_id, list(wanted))
        since, until = _hour_bounds(window_end)
        missing = [digest for digest in wanted if digest not in stored]
        if missing:
            columns = (
                "cluster_id",
                *HOLDING_COLUMNS,
                "digest",
                "first_window_end",
                "last_window_end",
            )
            rows = [(cluster_id, *wanted[d], d, since, until) for d in missing]
            bulk.insert_rows(UsageHolding, columns, rows, unique_fields=("cluster", "digest"))
            stored.update(self._read(cluster_id, missing))
        later = [pk for pk, first, last in stored.values() if last < window_end]
        earlier = [pk for pk, first, last in stored.values() if first > window_end]
        batch = fleet_constants.LOOKUP_BATCH_SIZE
        for query in bulk.filter_in(self.all(), "id", later, batch):
            query.update(last_window_end=until)
        for query in bulk.filter_in(self.all(), "id", earlier, batch):
            query.update(first_window_end=since)
        return [stored[digest][0] for digest in digests]

    def _read(
        self, cluster_id: int, digests: list[str]
    ) -> dict[str, tuple[int, datetime, datetime]]:
        found: dict[str, tuple[int, datetime, datetime]] = {}
        for query in bulk.filter_in(
            self.filter(cluster_id=cluster_id), "digest", digests, fleet_constants.LOOKUP_BATCH_SIZE
        ):
            rows = bulk.fetch_rows(query, "digest", "id", "first_window_end", "last_window_end")
            found.update((digest, (pk, first, last)) for digest, pk, first, last in rows)
        return found


def _hour_bounds(window_end: datetime) -> tuple[datetime, datetime]:
    """The hour a window ends in, as (start, end]: the window ending at 11:00 is 10:00's."""
    since = hour_floor(window_end - timedelta(microseconds=1))
    return since, since + timedelta(hours=1)


class UsageHolding(models.Model):
    """One GPU (or one pod's share of it) held by one pod: what its windows have in common.

    A holding is keyed on all of its columns (``digest``): a pod that moves to another
    workload, or a GPU shared by one more pod, starts a new holding. ``first_window_end`` and
    ``last_window_end`` bound the windows it has facts in, to the hour: every window it has a
    fact in ends in ``(first_window_end, last_window_end]`` (a window written again without it
    leaves them as they were, so they are bounds). Retention deletes a holding once its last
    hour is older than the usage kept.
    """

    cluster = models.ForeignKey(
        Cluster,
        related_name="usage_holdings",
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,
    )
    gpu = models.ForeignKey(
        Gpu,
        related_name="usage_holdings",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        db_constraint=False,
    )
    gpu_key = models.CharField(
        max_length=400,
        help_text="host/UUID/GPU_I_ID, or empty for allocated GPUs with no DCGM series.",
    )
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    workload = models.ForeignKey(
        Workload,
        related_name="usage_holdings",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="usage_holdings",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="usage_holdings",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    team = models.ForeignKey(
        Team,
        related_name="usage_holdings",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    allocated = models.BooleanField(help_text="Held by a running pod.")
    gpus = models.FloatField(
        help_text=(
            "GPUs this holding stands for: 1 per whole GPU, slices/7 per MIG instance, divided "
            "by the pods sharing a time-sliced GPU; N for N allocated GPUs without telemetry."
        ),
    )
    capacity_gpus = models.FloatField(
        default=0.0,
        help_text="Physical capacity this holding carries (0 on the extra pods of a shared GPU).",
    )
    shared = models.BooleanField(default=False, help_text="Time-sliced between several pods.")
    window_seconds = models.FloatField(help_text="Length of the windows it was seen in.")
    digest = models.CharField(max_length=32, help_text="Hash of every column above.")
    first_window_end = models.DateTimeField(help_text="Its windows end after this hour start.")
    last_window_end = models.DateTimeField(help_text="Its windows end by this hour end.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = UsageHoldingQuerySet.as_manager()

    class Meta:
        ordering = ["cluster_id", "gpu_key", "namespace", "pod", "id"]
        constraints = [
            # The writer's lookup of a window's holdings (UsageHoldingQuerySet.ids_for).
            models.UniqueConstraint(
                fields=["cluster", "digest"],
                name="ledger_usageholding_identity",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_key or 'no-telemetry'} {self.namespace}/{self.pod}"


class UsageFact(models.Model):
    """One holding over one collection window: the figures DCGM reported, nothing repeated.

    Its key is (holding, window end). On PostgreSQL that key has no unique index (one would
    cost ~37 bytes a row, a quarter of the whole row's budget): one copy per key is kept by the
    writer, ``write_wide_rows``, which refuses a window with two rows of one holding, and by
    ``UsageWindow``'s unique (cluster, window end), which a second writer of the same window
    waits on and then fails. Indexes: ``ledger_usagefact_holding`` (one GPU's or one workload's
    windows: GPU, node and workload pages, episode evidence; deduplicated by PostgreSQL to ~7
    bytes a row) and ``ledger_usagefact_window`` (every row of a time range: rollup of an hour,
    alert evaluation of a chunk, a window's rewrite), BRIN on PostgreSQL (a few kilobytes a day:
    rows arrive in window order), a B-tree elsewhere. SQLite also keeps the primary key.
    """

    # Columns in this order, 8-byte ones first: no alignment padding inside a row.
    pk = models.CompositePrimaryKey("holding", "window_end")
    holding = models.ForeignKey(
        UsageHolding,
        related_name="facts",
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,
    )
    window_end = models.DateTimeField(help_text="A window is (start, end]; samples end it.")
    activity = models.FloatField(
        null=True,
        blank=True,
        help_text="SM_ACTIVE, else GR_ENGINE_ACTIVE; null = no telemetry.",
    )
    pipe_tensor_active = models.FloatField(null=True, blank=True)
    gpu_util = models.FloatField(null=True, blank=True, help_text="DCGM_FI_DEV_GPU_UTIL, 0-100.")
    sm_active = Float4Field(null=True, blank=True, help_text="Null when it is the activity.")
    dram_active = Float4Field(null=True, blank=True)
    gr_engine_active = Float4Field(null=True, blank=True, help_text="Null when it is the activity.")
    fb_used_mib = Float4Field(null=True, blank=True)
    source = models.PositiveSmallIntegerField(
        default=0,
        help_text=(
            "Where the activity came from: 0 none, 1 SM_ACTIVE, 2 GR_ENGINE_ACTIVE; 3 and 4 "
            "the same with that column equal to the activity and not stored."
        ),
    )
    samples = models.PositiveSmallIntegerField(default=0)
    expected_samples = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-window_end"]
        indexes = [
            # Rollup of one hour, alert evaluation of a chunk of windows, a window's rewrite:
            # every row of a time range. BRIN on PostgreSQL (see the migration).
            models.Index(fields=["window_end"], name="ledger_usagefact_window"),
            # GPU, node and workload pages, episode evidence: one holding's windows.
            models.Index(fields=["holding"], name="ledger_usagefact_holding"),
        ]

    def __str__(self) -> str:
        return f"holding {self.holding_id} @ {self.window_end}"


class UsageWindow(models.Model):
    """One stored collection window of one cluster: which windows exist, and their start."""

    cluster = models.ForeignKey(
        Cluster,
        related_name="usage_windows",
        on_delete=models.CASCADE,
        db_index=False,
    )
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    rows = models.PositiveIntegerField(default=0, help_text="Usage rows the window holds.")
    written_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-window_end", "cluster_id"]
        constraints = [
            # Which windows a cluster has in a range (rollups, alerts, pages' "now").
            models.UniqueConstraint(
                fields=["cluster", "window_end"],
                name="ledger_usagewindow_cluster_end",
            ),
        ]

    def __str__(self) -> str:
        return f"cluster {self.cluster_id} window {self.window_end}"


def fact_values(
    holding_ids: Iterable[int], window_end: datetime, figures: Iterable[Sequence[Any]]
) -> list[tuple]:
    """Fact rows in ``FACT_COLUMNS`` order from each row's ``FACT_FIGURES`` and
    ``FACT_COUNTS`` values."""
    rows = []
    for holding_id, values in zip(holding_ids, figures, strict=True):
        activity, sm, tensor, dram, gr, util, fb, source, samples, expected = values
        code = SOURCE_CODES.get(source, 0)
        if activity is not None and code == 1 and sm == activity:
            code, sm = SM_FOLDED, None
        elif activity is not None and code == 2 and gr == activity:
            code, gr = GR_FOLDED, None
        rows.append(
            (
                holding_id,
                window_end,
                activity,
                sm,
                tensor,
                dram,
                gr,
                util,
                fb,
                code,
                min(int(samples or 0), MAX_SAMPLES),
                min(int(expected or 0), MAX_SAMPLES),
            )
        )
    return rows


def write_wide_rows(
    cluster_id: int,
    start: datetime,
    end: datetime,
    identities: Sequence[Sequence[Any]],
    figures: Sequence[Sequence[Any]],
) -> list[int]:
    """Add rows of one window given as ``HOLDING_COLUMNS`` values and ``FACT_FIGURES`` +
    ``FACT_COUNTS`` values: their holdings, facts and window. Returns the holding ids."""
    # One transaction (or a savepoint of the caller's): the bulk insert's scratch table is
    # dropped at commit, and a window's holdings, facts and row go together.
    with transaction.atomic():
        ids = UsageHolding.objects.ids_for(cluster_id, identities, end)
        if len(set(ids)) != len(ids):
            raise ValueError(f"cluster {cluster_id} window {end}: two usage rows of one holding")
        insert_facts(fact_values(ids, end, figures))
        window, created = UsageWindow.objects.get_or_create(
            cluster_id=cluster_id,
            window_end=end,
            defaults={"window_start": start, "rows": len(ids)},
        )
        if not created:
            # More rows of a window already there (GpuUsage.objects.bulk_create in parts); the
            # collector replaces a window as a whole (ledger.store.usage.delete_window first).
            UsageWindow.objects.filter(pk=window.pk).update(rows=models.F("rows") + len(ids))
    return ids


def write_wide(rows: Iterable[Mapping[str, Any]]) -> int:
    """Store wide rows given as ``GpuUsage`` values by attname (``cluster_id``, ``window_start``,
    ``window_end``, the holding's and the figures'; missing ones take the field's default),
    a window at a time, for loaders that build rows themselves (benchmarks). Returns the rows."""
    by_window: dict[tuple[int, datetime, datetime], list[Mapping[str, Any]]] = {}
    for row in rows:
        key = (row["cluster_id"], row["window_start"], row["window_end"])
        by_window.setdefault(key, []).append(row)
    defaults = {f.attname: f.get_default() for f in GpuUsage._meta.concrete_fields}
    written = 0
    for (cluster_id, start, end), window_rows in by_window.items():
        seconds = (end - start).total_seconds()
        identities = [
            tuple(row.get(name, defaults.get(name)) for name in HOLDING_COLUMNS[:-1]) + (seconds,)
            for row in window_rows
        ]
        figures = [
            tuple(row.get(name, defaults.get(name)) for name in (*FACT_FIGURES, *FACT_COUNTS))
            for row in window_rows
        ]
        write_wide_rows(cluster_id, start, end, identities, figures)
        written += len(window_rows)
    return written


def insert_facts(rows: list[tuple]) -> None:
    """Write fact rows (``fact_values``): binary COPY on PostgreSQL, executemany elsewhere."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        partitions.ensure_for(sorted({row[1] for row in rows}))
        bulk.copy_rows(UsageFact._meta.db_table, FACT_COLUMNS, rows)
    else:
        bulk.insert_rows(UsageFact, FACT_COLUMNS, rows)


class GpuUsageQuerySet(models.QuerySet["GpuUsage"]):
    def allocated(self) -> GpuUsageQuerySet:
        return self.filter(allocated=True)

    def idle(self, threshold: float | None = None) -> GpuUsageQuerySet:
        """Allocated GPU-windows with telemetry whose activity is below the idle threshold."""
        limit = settings.GPULEDGER_IDLE_THRESHOLD if threshold is None else threshold
        return self.allocated().filter(activity__lt=limit)

    def bulk_create(self, objs: Iterable[GpuUsage], *args: Any, **kwargs: Any) -> list[GpuUsage]:  # type: ignore[override]
        """Store wide rows as holdings, facts and windows (the view takes no INSERT)."""
        rows = list(objs)
        by_window: dict[tuple[int, datetime, datetime], list[GpuUsage]] = {}
        for row in rows:
            key = (row.cluster_id, row.window_start, row.window_end)
            by_window.setdefault(key, []).append(row)
        for (cluster_id, start, end), window_rows in by_window.items():
            seconds = (end - start).total_seconds()
            identities = [
                tuple(
                    seconds if name == "window_seconds" else getattr(row, name)
                    for name in HOLDING_COLUMNS
                )
                for row in window_rows
            ]
            figures = [
                tuple(getattr(row, name) for name in (*FACT_FIGURES, *FACT_COUNTS))
                for row in window_rows
            ]
            ids = write_wide_rows(cluster_id, start, end, identities, figures)
            for row, holding_id in zip(window_rows, ids, strict=True):
                row.holding_id = holding_id
        return rows

    def delete(self) -> tuple[int, dict[str, int]]:  # type: ignore[override]
        """Delete the facts under these rows, and the window rows left without any (holdings
        are left to retention)."""
        keys = list(self.order_by().values_list("cluster_id", "window_end", "holding_id"))
        deleted = 0
        by_window: dict[tuple[int, datetime], list[int]] = {}
        for cluster_id, window_end, holding_id in keys:
            by_window.setdefault((cluster_id, window_end), []).append(holding_id)
        for (cluster_id, window_end), holding_ids in by_window.items():
            for query in bulk.filter_in(
                UsageFact.objects.filter(window_end=window_end),
                "holding_id",
                holding_ids,
                fleet_constants.LOOKUP_BATCH_SIZE,
            ):
                deleted += query.delete()[0]
            left = GpuUsage.objects.filter(cluster_id=cluster_id, window_end=window_end)
            if not left.exists():
                UsageWindow.objects.filter(cluster_id=cluster_id, window_end=window_end).delete()
        return deleted, {UsageFact._meta.label: deleted}


class GpuUsage(models.Model):
    """One GPU (or one pod's share of it) over one collection window: a view over
    ``UsageFact`` joined with ``UsageHolding`` (the module docstring).

    Rows for allocated GPUs without any DCGM series have ``gpu`` empty and ``activity`` null:
    "no data", never idle. Unallocated GPUs have rows too, so capacity is exact per window.
    """

    pk = models.CompositePrimaryKey("holding", "window_end")
    holding = models.ForeignKey(
        UsageHolding,
        related_name="+",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    cluster = models.ForeignKey(
        Cluster,
        related_name="usage",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    window_start = models.DateTimeField()
    window_end = models.DateTimeField(help_text="A window is (start, end]; samples end it.")
    gpu = models.ForeignKey(
        Gpu,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    gpu_key = models.CharField(max_length=400)
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    workload = models.ForeignKey(
        Workload,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    team = models.ForeignKey(
        Team,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    allocated = models.BooleanField(help_text="Held by a running pod in this window.")
    gpus = models.FloatField()
    capacity_gpus = models.FloatField(default=0.0)
    shared = models.BooleanField(default=False)
    sm_active = models.FloatField(null=True, blank=True)
    pipe_tensor_active = models.FloatField(null=True, blank=True)
    dram_active = models.FloatField(null=True, blank=True)
    gr_engine_active = models.FloatField(null=True, blank=True)
    gpu_util = models.FloatField(null=True, blank=True, help_text="DCGM_FI_DEV_GPU_UTIL, 0-100.")
    fb_used_mib = models.FloatField(null=True, blank=True)
    activity = models.FloatField(null=True, blank=True)
    activity_source = models.CharField(
        max_length=20,
        choices=ActivitySource.choices,
        default=ActivitySource.NONE,
    )
    samples = models.PositiveIntegerField(default=0)
    expected_samples = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = GpuUsageQuerySet.as_manager()

    class Meta:
        managed = False
        db_table = "fleet_gpuusage"
        ordering = ["-window_end", "gpu_key", "namespace", "pod"]

    def __str__(self) -> str:
        return f"{self.gpu_key or 'no-telemetry'} {self.namespace}/{self.pod} @ {self.window_end}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Stored as a holding and a fact (``GpuUsageQuerySet.bulk_create``)."""
        GpuUsage.objects.bulk_create([self])

"""How fresh the data behind a page is, from ``fleet.IngestRun`` ("collected 2 min ago").

Two queries whatever the history size: the clusters with the ids of their newest run and newest
successful run per source (correlated subqueries on the ``fleet_ingestrun_freshness`` index),
then those runs. Runs without a cluster (a simulation over every cluster) count for all. Both
statements are compiled once per process (``_statements``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connections, router
from django.db.models import OuterRef, Q, Subquery
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.timesince import timesince

from core.bulk import fetch_sql
from core.errors import public_summary
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, IngestRun

# Sources whose age makes a page stale. Rollups run hourly by design, so they can be late
# without the page being wrong about "now"; a failed rollup is still shown as failing.
LIVE_SOURCES = (IngestSource.DCGM, IngestSource.KUEUE, IngestSource.SIMULATION)
SUCCESS_STATES = (IngestStatus.SUCCESS, IngestStatus.PARTIAL)


def ago(moment: datetime, now: datetime | None = None) -> str:
    """How long ago, for people: "just now", "2 minutes ago", "3 days, 4 hours ago"."""
    now = now or timezone.now()
    if (now - moment).total_seconds() < 60:
        return "just now"
    return f"{timesince(moment, now)} ago"


@dataclass
class SourceFreshness:
    cluster: str
    source: str
    source_label: str
    last_status: str
    last_error: str  # public_summary: no hosts, URLs or paths
    last_error_detail: str  # the full text, for staff
    last_success_at: datetime | None
    stale: bool
    failing: bool

    @property
    def ago(self) -> str:
        if self.last_success_at is None:
            return "never"
        return ago(self.last_success_at)


@dataclass
class Freshness:
    """Per (cluster, source) freshness, plus what the empty states need to say."""

    sources: list[SourceFreshness] = field(default_factory=list)
    cluster_count: int = 0
    prometheus_count: int = 0
    stale_seconds: int = 600

    @property
    def has_clusters(self) -> bool:
        return self.cluster_count > 0

    @property
    def has_prometheus(self) -> bool:
        return self.prometheus_count > 0

    @property
    def has_runs(self) -> bool:
        return bool(self.sources)

    @property
    def stale(self) -> bool:
        return any(s.stale for s in self.sources)

    @property
    def failing(self) -> bool:
        return any(s.failing for s in self.sources)

    @property
    def problems(self) -> list[SourceFreshness]:
        return [s for s in self.sources if s.stale or s.failing]

    @property
    def newest_success_at(self) -> datetime | None:
        moments = [s.last_success_at for s in self.sources if s.last_success_at]
        return max(moments) if moments else None

    @property
    def summary(self) -> str:
        newest = self.newest_success_at
        if newest is None:
            return "nothing collected yet"
        return f"collected {ago(newest)}"


def _newest(source: str, *, succeeded: bool, cluster_ref: OuterRef | None) -> Subquery:
    runs = IngestRun.objects.filter(source=source)
    if cluster_ref is None:
        runs = runs.filter(cluster__isnull=True)
    else:
        runs = runs.filter(cluster_id=cluster_ref)
    if succeeded:
        runs = runs.filter(status__in=SUCCESS_STATES)
    return Subquery(runs.order_by("-started_at").values("pk")[:1])


# Per source: the cluster's newest run and newest successful run (the statement's columns after
# pk, name and prometheus_url, in this order).
RUN_COLUMNS = tuple(f"{kind}_{source.value}" for source in IngestSource for kind in ("last", "ok"))


def _annotations() -> dict[str, Subquery]:
    return {
        f"{kind}_{source.value}": _newest(
            source, succeeded=kind == "ok", cluster_ref=OuterRef("pk")
        )
        for source in IngestSource
        for kind in ("last", "ok")
    }


@functools.cache
def _statements(vendor: str) -> tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]:
    """The two fixed statements, compiled once per process and database vendor: building the
    sixteen subqueries through the ORM took ~20 ms of CPU on every page."""
    annotations = _annotations()
    clusters = Cluster.objects.annotate(**annotations).values(
        "pk", "name", "prometheus_url", *annotations
    )
    # Cluster-less runs (one simulation for every cluster), newest of each kind per source.
    global_filter = Q()
    for source in IngestSource:
        for succeeded in (False, True):
            global_filter |= Q(pk=_newest(source, succeeded=succeeded, cluster_ref=None))
    global_runs = IngestRun.objects.filter(global_filter).values("pk")
    return clusters.query.sql_with_params(), global_runs.query.sql_with_params()


def current_freshness(now: datetime | None = None) -> Freshness:
    now = now or timezone.now()
    stale_after = settings.GPULEDGER_STALE_SECONDS
    sources = list(IngestSource)
    # The database a page reads (a read replica, core/dbrouter.py): the raw statement too.
    using = router.db_for_read(Cluster)
    clusters_sql, global_sql = _statements(connections[using].vendor)
    names = ("pk", "name", "prometheus_url", *RUN_COLUMNS)
    clusters = [dict(zip(names, row, strict=True)) for row in fetch_sql(*clusters_sql, using=using)]
    run_ids = {row[key] for row in clusters for key in RUN_COLUMNS if row[key] is not None}
    global_ids = RawSQL(*global_sql)
    runs: dict[int, IngestRun] = {
        run.pk: run
        for run in IngestRun.objects.filter(Q(pk__in=run_ids) | Q(pk__in=global_ids)).only(
            "pk", "cluster_id", "source", "status", "error", "started_at", "finished_at"
        )
    }

    result = Freshness(
        cluster_count=len(clusters),
        prometheus_count=sum(1 for row in clusters if row["prometheus_url"]),
        stale_seconds=stale_after,
    )
    global_runs: dict[str, list[IngestRun]] = {}
    for run in runs.values():
        if run.cluster_id is None:
            global_runs.setdefault(run.source, []).append(run)

    def entry(cluster_name: str, source: IngestSource, candidates: list[IngestRun]) -> None:
        if not candidates:
            return
        last = max(candidates, key=lambda run: run.started_at)
        successes = [run for run in candidates if run.status in SUCCESS_STATES]
        ok = max(successes, key=lambda run: run.started_at) if successes else None
        ok_at = (ok.finished_at or ok.started_at) if ok else None
        stale = source in LIVE_SOURCES and (
            ok_at is None or (now - ok_at).total_seconds() > stale_after
        )
        # A live collector that never succeeded is failing; a running first run is just stale.
        failing = last.status == IngestStatus.FAILED
        result.sources.append(
            SourceFreshness(
                cluster=cluster_name,
                source=source.value,
                source_label=source.label,
                last_status=last.status,
                last_error=public_summary(last.error),
                last_error_detail=last.error[:300],
                last_success_at=ok_at,
                stale=stale,
                failing=failing,
            )
        )

    for row in clusters:
        for source in sources:
            candidates = [
                runs[row[key]]
                for key in (f"last_{source.value}", f"ok_{source.value}")
                if row[key] in runs
            ]
            entry(row["name"], source, candidates)
    for source in sources:
        entry("all clusters", source, global_runs.get(source.value, []))
    return result

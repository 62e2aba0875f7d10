"""Collect DCGM usage from Prometheus: one normal run, or a backfill of a historical range.

    manage.py collect_metrics                                  # the one cluster (PROMETHEUS_URL)
    manage.py collect_metrics --cluster prod                   # like the beat task (catch-up too)
    manage.py collect_metrics --cluster prod \\
        --start 2026-06-01T00:00:00Z --end 2026-06-08T00:00:00Z  # backfill, window by window
    manage.py collect_metrics --cluster lab --prometheus-url http://127.0.0.1:9090

A backfill takes two paths, hour by hour: hours that end more than GPULEDGER_USAGE_RETENTION_DAYS
ago go straight into hourly rollups (``ledger.deep``: hour-step queries, no per-window rows,
which retention would drop at once); newer ones are collected window by window. One progress bar
(in windows, with an ETA) covers both.

A backfill is resumable: after Ctrl-C (or a Prometheus failure), running the same command again
skips every window that already has a successful IngestRun and every hour already rolled up or
deep-backfilled, and collects the rest. Re-collecting a window replaces its rows, so overlapping
ranges are harmless.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import URLValidator
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from core.timewindows import hour_floor, windows_between
from fleet.models import Cluster, ClusterChoiceError
from fleet.prometheus import PrometheusError
from ledger.collector import Collector, CollectResult
from ledger.deep import DeepBackfill, DeepResult, hours_between


@dataclass
class Backfilled:
    """A backfill's two parts: window by window, and deep (hourly rollups only)."""

    windows: CollectResult
    deep: DeepResult | None = None


def deep_cutoff(now: datetime | None = None) -> datetime:
    """Hours starting before this end more than the usage retention ago: deep-backfilled."""
    now = now or timezone.now()
    return hour_floor(now - timedelta(days=settings.GPULEDGER_USAGE_RETENTION_DAYS))


def parse_moment(value: str, option: str) -> datetime:
    moment = parse_datetime(value)
    if moment is None:
        raise CommandError(f"{option} {value!r} is not an ISO 8601 date-time")
    if moment.tzinfo is None:
        raise CommandError(
            f"{option} {value!r} has no UTC offset; give one, e.g. {value}Z or {value}+02:00"
        )
    return moment


class Command(BaseCommand):
    help = "Collect DCGM usage and GPU allocation from Prometheus (a normal run, or a backfill)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--cluster",
            help="Cluster name (slug); required when there are several. Default: the only "
            "cluster, or the one PROMETHEUS_URL / KUBECONFIG describe.",
        )
        parser.add_argument("--start", help="Backfill from this ISO 8601 time (with offset).")
        parser.add_argument("--end", help="Backfill up to this ISO 8601 time (with offset).")
        parser.add_argument(
            "--prometheus-url",
            help="Create the cluster, or set its Prometheus URL, before collecting.",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar on stderr.")

    def handle(self, *args: object, **options: object) -> None:
        name = str(options["cluster"] or "")
        start_raw, end_raw = options.get("start"), options.get("end")
        if bool(start_raw) != bool(end_raw):
            raise CommandError("--start and --end go together")
        start = parse_moment(str(start_raw), "--start") if start_raw else None
        end = parse_moment(str(end_raw), "--end") if end_raw else None
        if start and end and start >= end:
            raise CommandError("--start must be before --end")
        cluster = self._cluster(name, options.get("prometheus_url"))
        if not cluster.prometheus_url:
            raise CommandError(
                f"cluster {cluster.name} has no Prometheus URL (use --prometheus-url)"
            )

        collector = Collector(cluster)
        deep: DeepResult | None = None
        try:
            if start and end:
                both = self._backfill(collector, start, end, bool(options["no_progress"]))
                result, deep = both.windows, both.deep
            else:
                result = collector.run()
        except PrometheusError as exc:
            kind = "permanent" if exc.permanent else "transient"
            raise CommandError(
                f"Prometheus failed ({kind}): {exc}. Windows written so far are kept; "
                "run the command again to resume."
            ) from exc
        except KeyboardInterrupt as exc:
            raise CommandError(
                "interrupted; windows and hours written so far are kept, run the same command "
                "to resume"
            ) from exc
        if deep is not None:
            self.stdout.write(
                f"{cluster.name}: {len(deep.hours)} hours deep-backfilled into hourly rollups "
                f"({deep.shards} shards), {deep.hours_skipped} already done"
            )
        if not result.claimed:
            raise CommandError(f"{result.busy}; try again when it is done")
        self.stdout.write(
            f"{cluster.name}: {result.windows} windows collected, "
            f"{result.windows_skipped} already done, {result.rows_written} usage rows, "
            f"{len(result.hours_rolled_up)} hours rolled up"
        )

    def _cluster(self, name: str, url: object) -> Cluster:
        if not name:
            if url:
                raise CommandError("--prometheus-url needs --cluster (the cluster to set it on)")
            try:
                return Cluster.objects.unnamed()
            except ClusterChoiceError as exc:
                raise CommandError(str(exc)) from exc
        if url:
            try:
                URLValidator(schemes=["http", "https"])(str(url))
            except ValidationError as exc:
                raise CommandError(f"--prometheus-url {url!r} is not an http(s) URL") from exc
            cluster, created = Cluster.objects.get_or_create(
                name=name, defaults={"prometheus_url": str(url)}
            )
            if not created and cluster.prometheus_url != url:
                cluster.prometheus_url = str(url)
                cluster.save(update_fields=["prometheus_url", "updated_at"])
            return cluster
        try:
            return Cluster.objects.get(name=name)
        except Cluster.DoesNotExist as exc:
            raise CommandError(
                f"no cluster named {name!r} (add --prometheus-url to create it)"
            ) from exc

    def _backfill(
        self, collector: Collector, start: datetime, end: datetime, quiet: bool
    ) -> Backfilled:
        """Deep-backfill the hours older than the retention, collect the rest window by window."""
        cutoff = deep_cutoff()
        deep_hours = hours_between(hour_floor(start), min(end, cutoff))
        window_start = max(start, deep_hours[-1] + timedelta(hours=1)) if deep_hours else start
        seconds = collector.window_seconds
        total = len(deep_hours) * (3600 // seconds)
        if window_start < end:
            total += sum(1 for _ in windows_between(window_start, end, seconds))
        with tqdm(
            total=total,
            unit="window",
            file=sys.stderr,
            disable=quiet,
            desc=collector.cluster.name,
        ) as bar:
            deep = None
            if deep_hours:
                deep = DeepBackfill(collector.cluster, window_seconds=seconds).run(
                    deep_hours[0],
                    deep_hours[-1] + timedelta(hours=1),
                    progress=lambda hours: bar.update(hours * (3600 // seconds)),
                )
            if window_start >= end:
                return Backfilled(CollectResult(cluster=collector.cluster.name), deep)
            return Backfilled(collector.backfill(window_start, end, progress=bar.update), deep)

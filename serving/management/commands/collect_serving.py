"""Collect serving hours from Prometheus: the due hours, or a historical range again.

    manage.py collect_serving --cluster prod                  # like the beat task
    manage.py collect_serving --cluster prod \\
        --start 2026-06-01T00:00:00Z --end 2026-06-02T00:00:00Z   # every hour, re-collected

Re-collecting an hour replaces its rows, so overlapping ranges are harmless.
"""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.timewindows import hour_floor
from fleet.models import Cluster
from fleet.prometheus import PrometheusClient, PrometheusError
from serving.collector import collect_due, collect_hour, hours_between


def _moment(value: str, option: str) -> datetime:
    moment = parse_datetime(value)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"{option} {value!r} is not an ISO 8601 date-time with a UTC offset")
    return moment


class Command(BaseCommand):
    help = "Collect serving metrics per workload-hour (due hours, or --start/--end again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="Cluster name (slug).")
        parser.add_argument("--start", help="First hour to collect (ISO 8601, with offset).")
        parser.add_argument("--end", help="Collect hours that start before this moment.")

    def handle(self, *args: object, **options: object) -> None:
        try:
            cluster = Cluster.objects.get(name=str(options["cluster"]))
        except Cluster.DoesNotExist as exc:
            raise CommandError(f"no cluster named {options['cluster']!r}") from exc
        if not cluster.prometheus_url:
            raise CommandError(f"cluster {cluster.name} has no Prometheus URL")
        start, end = options.get("start"), options.get("end")
        try:
            if not start and not end:
                result = collect_due(cluster)
                self.stdout.write(f"{cluster.name}: {len(result.hours)} hours collected")
                return
            if not start or not end:
                raise CommandError("--start and --end go together")
            first, stop = _moment(str(start), "--start"), _moment(str(end), "--end")
            # Only complete hours: the one in progress is collected once it is over.
            stop = min(stop, hour_floor(timezone.now()))
            rows = hours = 0
            with PrometheusClient.for_cluster(cluster) as client:
                for hour in hours_between(first, stop):
                    rows += collect_hour(cluster, hour, client=client).rows
                    hours += 1
        except PrometheusError as exc:
            raise CommandError(f"{cluster.name}: {exc}") from exc
        self.stdout.write(f"{cluster.name}: {hours} hours collected, {rows} workload-hours")

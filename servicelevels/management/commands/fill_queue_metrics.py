"""Read Kueue's own metrics for a range of hours into ``QueueMetricsHour`` (queue service levels
before the first admission record; docs/architecture.md "Queue service levels").

    manage.py fill_queue_metrics --cluster prod \\
        --start 2026-06-01T00:00:00Z --end 2026-06-08T00:00:00Z [--resume]

Whole UTC hours in (start, end], one day per query and transaction. Re-running replaces the hours
it reads (idempotent); ``--resume`` starts after the newest hour already stored in the range.
"""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from fleet.models import Cluster, ClusterChoiceError
from fleet.prometheus import PrometheusClient, PrometheusError
from servicelevels.metrics import fill_hours


def _moment(value: str, option: str) -> datetime:
    moment = parse_datetime(value or "")
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"{option} {value!r} is not an ISO 8601 date-time with a UTC offset")
    return moment


class Command(BaseCommand):
    help = "Fill hourly queue service levels from Kueue's Prometheus metrics for a range."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", default="", help="Cluster name (default: the only one).")
        parser.add_argument("--start", required=True, help="ISO 8601 time with offset.")
        parser.add_argument("--end", required=True, help="ISO 8601 time with offset.")
        parser.add_argument(
            "--resume", action="store_true", help="Start after the newest hour already stored."
        )

    def handle(self, *args: object, **options: object) -> None:
        start = _moment(str(options["start"]), "--start")
        end = _moment(str(options["end"]), "--end")
        if end <= start:
            raise CommandError("--end must be after --start")
        name = str(options["cluster"] or "")
        try:
            cluster = Cluster.objects.get(name=name) if name else Cluster.objects.unnamed()
        except Cluster.DoesNotExist as exc:
            raise CommandError(f"no cluster named {name!r}") from exc
        except ClusterChoiceError as exc:
            raise CommandError(str(exc)) from exc
        if not cluster.prometheus_url:
            raise CommandError(f"cluster {cluster.name} has no Prometheus URL")
        try:
            with PrometheusClient.for_cluster(cluster) as client:
                result = fill_hours(
                    cluster, start, end, client.query_range, resume=bool(options["resume"])
                )
        except PrometheusError as exc:
            raise CommandError(
                f"Prometheus failed: {exc} (hours before it are stored; rerun with --resume)"
            ) from exc
        self.stdout.write(
            f"{cluster.name}: {result.hours_written} queue-hours from Kueue's metrics, "
            f"{result.series_read} series read, {result.skipped} values skipped"
            + (f" ({dict(result.skip_reasons)})" if result.skipped else "")
        )

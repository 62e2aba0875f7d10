"""Evaluate the hoarding rules over stored windows (what the collector does after each run).

    manage.py evaluate_alerts --cluster prod --start 2026-06-01T00:00:00Z --end 2026-06-08T00:00:00Z

Idempotent: windows already evaluated are skipped, so a range may be run again at any time.
Episodes first written by this command are marked as not detected live (never notified when
already resolved).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alerts.evaluate import evaluate_range
from fleet.models import Cluster
from ledger.management.commands.collect_metrics import parse_moment


class Command(BaseCommand):
    help = "Evaluate the hoarding alert rules over a cluster's stored windows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="Cluster name (slug).")
        parser.add_argument("--start", required=True, help="ISO 8601 time with offset.")
        parser.add_argument("--end", required=True, help="ISO 8601 time with offset.")
        parser.add_argument(
            "--live",
            action="store_true",
            help="Mark new episodes as detected live (default: as a backfill).",
        )

    def handle(self, *args: object, **options: object) -> None:
        name = str(options["cluster"])
        start = parse_moment(str(options["start"]), "--start")
        end = parse_moment(str(options["end"]), "--end")
        if end <= start:
            raise CommandError("--end must be after --start")
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {name!r}")
        result = evaluate_range(cluster.pk, start, end, live=bool(options["live"]))
        self.stdout.write(
            self.style.SUCCESS(
                f"cluster {cluster.name}: {result.windows} windows evaluated, "
                f"{result.created} episodes created, {result.updated} updated, "
                f"{result.deleted} pending dropped."
            )
        )

"""Build or refresh the admission records of every Workload the sync has stored.

    manage.py build_admission_records [--cluster prod]

The sync keeps the records up to date after each write; this builds them for Workloads stored
before (an install that synced before the records existed) and picks up pods' running times
written by the kube-state-metrics windows. Idempotent: only changed fields are written; records
it creates are marked ``conditions`` (docs/architecture.md "Queue service levels").
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Cluster
from servicelevels.build import build_records
from servicelevels.choices import RecordSource


class Command(BaseCommand):
    help = "Build or refresh admission records from the stored Workloads, transitions and pods."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", default="", help="Cluster name (default: every cluster).")

    def handle(self, *args: object, **options: object) -> None:
        name = str(options["cluster"] or "")
        clusters = Cluster.objects.filter(name=name) if name else Cluster.objects.all()
        if name and not clusters.exists():
            raise CommandError(f"no cluster named {name!r}")
        for cluster in clusters.order_by("name"):
            result = build_records(cluster, source=RecordSource.CONDITIONS)
            self.stdout.write(
                f"{cluster.name}: {result.created} records created, {result.updated} updated, "
                f"{result.skipped} skipped"
                + (f" ({result.skip_reasons})" if result.skipped else "")
            )

"""Rebuild the hourly rollups of a range, or check them against the usage rows and repair them.

    manage.py rollup --cluster prod --start 2026-06-01T00:00Z --end 2026-06-08T00:00Z
    manage.py rollup --start 2026-06-01T00:00Z --end 2026-06-08T00:00Z --verify
    manage.py rollup --start 2026-06-01T00:00Z --end 2026-06-08T00:00Z --verify --repair

Without ``--verify`` every hour touching ``[start, end)`` is rolled up again (idempotent: an
hour's rows are replaced as a whole). ``--verify`` compares each hour's fleet and namespace
rollups with sums taken directly from the usage rows (``ledger.rollup.verify``), prints every
difference and exits non-zero when there is one; ``--repair`` rolls up again the hours that
differ and checks them once more. Hours whose usage rows were pruned are reported as not
verifiable and never rebuilt: their rollups are all that is left. ``--cluster`` may be left out
when there is only one cluster.
"""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Cluster
from ledger.management.commands.collect_metrics import parse_moment
from ledger.rollup.verify import HourCheck, hours_of, rebuild_hours, verify_hour, verify_range


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class Command(BaseCommand):
    help = "Roll up a range of hours again, or check the rollups against the usage rows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="Cluster name; optional when there is only one.")
        parser.add_argument("--start", required=True, help="ISO 8601 time with offset.")
        parser.add_argument("--end", required=True, help="ISO 8601 time with offset.")
        parser.add_argument(
            "--verify",
            action="store_true",
            help="Compare the rollups with the usage rows instead of rebuilding them.",
        )
        parser.add_argument(
            "--repair",
            action="store_true",
            help="With --verify: roll up again the hours that differ (implies --verify).",
        )

    def handle(self, *args: object, **options: object) -> None:
        start = parse_moment(str(options["start"]), "--start")
        end = parse_moment(str(options["end"]), "--end")
        if start >= end:
            raise CommandError("--start must be before --end")
        cluster = self._cluster(options.get("cluster"))
        if options["verify"] or options["repair"]:
            self._verify(cluster, start, end, repair=bool(options["repair"]))
            return
        rebuilt = rebuild_hours(cluster, hours_of(start, end))
        for hour, reason in rebuilt.kept:
            self.stdout.write(f"{hour.isoformat()}: kept as it is: {reason}")
        self.stdout.write(
            f"{cluster.name}: {_plural(len(rebuilt.rolled_up), 'hour')} rolled up "
            f"({_plural(rebuilt.rows, 'row')}), {len(rebuilt.kept)} kept (usage pruned)"
        )

    def _cluster(self, name: object) -> Cluster:
        if name:
            try:
                return Cluster.objects.get(name=str(name))
            except Cluster.DoesNotExist as exc:
                raise CommandError(f"no cluster named {name!r}") from exc
        clusters = list(Cluster.objects.order_by("name")[:2])
        if not clusters:
            raise CommandError("there is no cluster yet")
        if len(clusters) > 1:
            names = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
            raise CommandError(f"there are several clusters ({names}): name one with --cluster")
        return clusters[0]

    def _verify(self, cluster: Cluster, start: datetime, end: datetime, *, repair: bool) -> None:
        checks = verify_range(cluster, start, end)
        for check in checks:
            self._report(check)
        differing = [check for check in checks if check.differs]
        unverifiable = sum(1 for check in checks if check.unverifiable)
        self.stdout.write(
            f"{cluster.name}: {_plural(len(checks), 'hour')} checked, "
            f"{len(checks) - len(differing) - unverifiable} agree, {len(differing)} differ, "
            f"{unverifiable} not verifiable (usage pruned)"
        )
        if not differing:
            return
        if not repair:
            raise CommandError(
                f"{_plural(len(differing), 'hour')} differ from the usage rows; "
                "run again with --repair to roll them up again"
            )
        rebuilt = rebuild_hours(cluster, [check.hour for check in differing])
        still = [verify_hour(cluster, hour) for hour in rebuilt.rolled_up]
        still = [check for check in still if check.differs]
        for check in still:
            self._report(check)
        self.stdout.write(
            f"{cluster.name}: {_plural(len(rebuilt.rolled_up), 'hour')} rolled up again, "
            f"{len(still)} still differ"
        )
        if still:
            raise CommandError(f"{_plural(len(still), 'hour')} still differ after the repair")

    def _report(self, check: HourCheck) -> None:
        if check.unverifiable:
            self.stdout.write(f"{check.hour.isoformat()}: not verifiable: {check.unverifiable}")
        for difference in check.differences:
            self.stdout.write(f"{check.hour.isoformat()}: {difference}")

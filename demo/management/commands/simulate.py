"""Build a realistic simulated fleet through the real ingest code (``make demo``).

Every row is written by the same pure ingest functions and writers the collectors use: the
simulator renders Prometheus answers and Kubernetes LIST payloads, and nothing else writes the
tables.
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from alerts.evaluate import evaluate_range
from alerts.overprovisioned import evaluate_serving
from demo.follow import finish_run, follow, history_written, ingest_window, simulation_run
from demo.objectives import seed_queue_objective
from demo.rates import seed_rate_cards
from demo.simulation import FleetSimulator
from fleet.choices import QuotaSource
from fleet.ingest import IngestStats
from fleet.models import Cluster
from ledger.rollup import roll_up_range
from quotas.models import Team


class Command(BaseCommand):
    help = "Simulate a GPU fleet (nodes, Kueue queues, workloads, DCGM telemetry) for N days."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--days", type=float, default=7.0, help="Days of history (default 7).")
        parser.add_argument("--seed", type=int, default=42, help="Random seed (default 42).")
        parser.add_argument(
            "--step",
            type=int,
            default=900,
            help="Simulated collection window in seconds (default 900; the collector uses "
            "GPULEDGER_COLLECT_SECONDS).",
        )
        parser.add_argument("--cluster", default="demo", help="Cluster name (default demo).")
        parser.add_argument(
            "--scheduler",
            choices=[QuotaSource.KUEUE, QuotaSource.VOLCANO],
            default=QuotaSource.KUEUE,
            help="The cluster's queueing layer (default kueue). A volcano cluster's API server "
            "serves Volcano Queues and PodGroups, read through the Volcano quota source; it has "
            "no Kueue metrics, so its sync runs over the whole history.",
        )
        parser.add_argument(
            "--sync-days",
            type=float,
            default=None,
            help="Days before the end that the API server sync ran (default: half the history). "
            "Earlier windows get their quota history from Kueue's metrics only, as a fresh "
            "install backfilling from Prometheus would.",
        )
        parser.add_argument(
            "--end",
            help="End of the simulated period, ISO 8601 with offset (default: now).",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Delete the cluster's data (and teams left without queues) first.",
        )
        parser.add_argument(
            "--follow",
            action="store_true",
            help="After the history, keep the fleet moving: one window a minute up to now, "
            "through the same ingest path, until SIGTERM / SIGINT (or the parent process ends). "
            "With the same --seed, --days, --step and --end as a history already written, "
            "that history is replayed in memory and not written again (make demo).",
        )
        parser.add_argument(
            "--max-windows",
            type=int,
            default=None,
            help="With --follow: stop after writing this many live windows (tests).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        step = options["step"]
        if days <= 0:
            raise CommandError("--days must be positive")
        if step < 60 or 3600 % step:
            raise CommandError("--step must be at least 60 and divide an hour (60, 300, 600…)")
        end = self._parse_end(options["end"])
        if options["reset"]:
            self._reset(options["cluster"])
        scheduler = options["scheduler"]
        cluster, _ = Cluster.objects.get_or_create(
            name=options["cluster"],
            defaults={
                "display_name": "Simulated fleet"
                if scheduler == QuotaSource.KUEUE
                else f"Simulated fleet ({QuotaSource(scheduler).label})",
                "quota_source": scheduler,
            },
        )
        if cluster.quota_source != scheduler:
            raise CommandError(
                f"cluster {cluster.name} reads {cluster.quota_source or 'a detected source'}, not "
                f"{scheduler}: pick another --cluster, or --reset it"
            )
        if options["verbosity"] < 2:
            # One progress bar instead of a log line per window and per hour.
            for name in ("fleet", "quotas", "ledger"):
                logging.getLogger(name).setLevel(logging.WARNING)
        sim = FleetSimulator(
            seed=options["seed"], end=end, days=days, step_seconds=step, scheduler=scheduler
        )
        if options["follow"] and not options["reset"] and history_written(cluster, sim):
            # make demo: the history is in the tables; replay it in memory and go on live.
            for window in sim.windows():
                sim.advance(window.start)
            self._follow(cluster, sim, options)
            return
        windows = list(sim.windows())
        sync_days = options["sync_days"]
        if scheduler != QuotaSource.KUEUE:
            sync_days = days  # no Kueue metrics to backfill the quota history from
        synced_from = sim.end - timedelta(days=days / 2 if sync_days is None else sync_days)
        # The rate cards first: alert episodes evaluated on the simulated history cost under them.
        cards = seed_rate_cards(sim.start, sim.end)
        stats = IngestStats()
        kube_skipped = 0
        rows = 0
        with simulation_run(cluster, sim.start, sim.end) as run:
            for window in tqdm(windows, desc="simulating", unit="window", disable=None):
                written = ingest_window(
                    cluster,
                    sim,
                    window,
                    synced=window.end >= synced_from,
                    last=window is windows[-1],
                )
                rows += written.rows
                kube_skipped += written.kube_skipped
                stats.merge(written.stats)
            rows += roll_up_range(cluster.id, sim.start, sim.end)
            # Evaluated here, as a backfill, not queued for a worker: the demo shows last week's
            # hoarding episodes as soon as it is loaded, with or without a worker running.
            evaluate_range(cluster.id, sim.start, sim.end, live=False)
            # The serving deployments' complete days, as the hourly beat entry judges them.
            evaluate_serving(sim.end)
            # A wait objective on one queue, breached on the simulated week's slow day.
            seed_queue_objective(cluster)
            finish_run(run, stats, rows, kube_skipped)
        self.stdout.write(
            self.style.SUCCESS(
                f"Simulated {days:g} days ({len(windows)} windows of {step} s) on cluster "
                f"{cluster.name}: {len(sim.nodes)} nodes, {len(sim.workloads)} workloads, "
                f"{rows} rows written; {cards} demo rate cards (per flavor, one price change)."
            )
        )
        if options["follow"]:
            self._follow(cluster, sim, options)

    def _follow(self, cluster: Cluster, sim: FleetSimulator, options: dict[str, Any]) -> None:
        self.stdout.write(
            f"Following: one window a minute on cluster {cluster.name} (Ctrl-C stops)."
        )
        written = follow(cluster, sim, max_windows=options["max_windows"])
        self.stdout.write(f"Stopped following after {written} live windows.")

    def _parse_end(self, raw: str | None) -> datetime:
        if not raw:
            return timezone.now()
        moment = parse_datetime(raw)
        if moment is None:
            raise CommandError(f"--end {raw!r} is not an ISO 8601 date-time")
        if timezone.is_naive(moment):
            raise CommandError(f"--end {raw!r} has no UTC offset (add Z or +00:00)")
        return moment

    def _reset(self, name: str) -> None:
        with transaction.atomic():
            Cluster.objects.filter(name=name).delete()
            Team.objects.filter(
                Q(cluster_queues__isnull=True) & Q(namespaces__isnull=True)
            ).delete()
        self.stdout.write(f"Reset cluster {name}.")
